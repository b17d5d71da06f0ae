"""The agent's SQLite files keep one connection open per thread (reviewer_gate.sqlite_files): reused
by a thread's calls, never shared between threads, never left inside a failed transaction, and a
commit that returned is durable though the WAL was not checkpointed (a kill -9 right after it)."""

import multiprocessing
import os
import signal
import sqlite3
import threading
import time

import pytest

from reviewer_gate import SQLiteUsedStore
from reviewer_gate.request_store import SQLiteRequestStore
from reviewer_gate.sqlite_files import ThreadConnections


def test_a_thread_reuses_its_connection_and_another_thread_gets_its_own(tmp_path):
    connections = ThreadConnections(tmp_path / "state.sqlite3")
    first = connections.connection()
    assert connections.connection() is first
    with connections.transaction() as inside:
        assert inside is first

    seen = []
    other = threading.Thread(target=lambda: seen.append(connections.connection()))
    other.start()
    other.join(timeout=10)
    assert len(seen) == 1 and seen[0] is not first


def test_the_file_is_in_wal_mode_and_commits_sync_fully(tmp_path):
    connections = ThreadConnections(tmp_path / "state.sqlite3")
    connection = connections.connection()
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert connection.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_a_failed_transaction_is_rolled_back_and_the_next_call_starts_clean(tmp_path):
    connections = ThreadConnections(tmp_path / "state.sqlite3")
    connections.connection().execute("CREATE TABLE notes (body TEXT NOT NULL)")
    with pytest.raises(sqlite3.IntegrityError), connections.transaction() as connection:
        connection.execute("INSERT INTO notes (body) VALUES ('kept only if the transaction commits')")
        connection.execute("INSERT INTO notes (body) VALUES (NULL)")
    assert not connections.connection().in_transaction
    with connections.transaction() as connection:
        connection.execute("INSERT INTO notes (body) VALUES ('second')")
    rows = sqlite3.connect(tmp_path / "state.sqlite3").execute("SELECT body FROM notes").fetchall()
    assert rows == [("second",)]


def test_a_connection_left_in_a_transaction_is_rolled_back_before_its_next_call(tmp_path):
    connections = ThreadConnections(tmp_path / "state.sqlite3", isolation_level=None)
    connection = connections.connection()
    connection.execute("CREATE TABLE notes (body TEXT)")
    connection.execute("BEGIN IMMEDIATE")
    connection.execute("INSERT INTO notes VALUES ('abandoned')")  # as if its ROLLBACK had failed
    assert connections.connection().in_transaction is False
    assert connection.execute("SELECT count(*) FROM notes").fetchone()[0] == 0


def test_writes_of_one_store_are_seen_at_once_by_another_store_on_the_same_file(tmp_path):
    writer, reader = (SQLiteRequestStore(tmp_path / "requests.sqlite3") for _ in range(2))
    assert reader.current_request("task-1") is None  # the reader's connection is open from here on
    writer.save_request("task-1", "ctx", {"request_id": "r-1", "action": {}, "action_digest": "d"})
    asked = reader.current_request("task-1")
    assert asked is not None and asked.request_id == "r-1"


def _claim_then_die(path: str) -> None:
    SQLiteUsedStore(path).claim("jti-claimed-before-the-kill", int(time.time()) + 600)
    os.kill(os.getpid(), signal.SIGKILL)  # no close, no checkpoint: only the synced WAL holds the claim


def test_a_claim_survives_its_process_being_killed_right_after_it(tmp_path):
    path = str(tmp_path / "used.sqlite3")
    SQLiteUsedStore(path)  # the file exists before the child opens it
    child = multiprocessing.get_context("spawn").Process(target=_claim_then_die, args=(path,))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == -signal.SIGKILL
    assert SQLiteUsedStore(path).claim("jti-claimed-before-the-kill", int(time.time()) + 600) is False
