"""The test flush is tried again when PostgreSQL cancels it to break a deadlock with a running server's
transaction (tests/audit/pg_flush.py). The deadlock here is a real one: a second connection holds one
table and then reads the other while the TRUNCATE holds the first and waits for the second."""

import threading
import uuid

import psycopg
import pytest
from django.core.management.base import CommandError
from django.db import connection

from tests.audit.pg_flush import flush_retrying_deadlocks


def _conninfo() -> str:
    settings = connection.settings_dict
    return psycopg.conninfo.make_conninfo(
        dbname=settings["NAME"],
        user=settings["USER"],
        password=settings["PASSWORD"],
        host=settings["HOST"],
        port=settings["PORT"],
    )


@pytest.mark.postgres
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the deadlock is PostgreSQL's")
@pytest.mark.django_db
def test_a_flush_cancelled_by_a_deadlock_is_tried_again_and_empties_the_tables():
    conninfo = _conninfo()
    first, second = (f"flush_{name}_{uuid.uuid4().hex[:8]}" for name in ("first", "second"))
    with psycopg.connect(conninfo, autocommit=True) as setup:
        for table in (first, second):
            setup.execute(f"CREATE TABLE {table} (id int)")
            setup.execute(f"INSERT INTO {table} VALUES (1)")
    server = psycopg.connect(conninfo)  # a worker's transaction, as the e2e servers run one
    server.execute("SET deadlock_timeout = '30s'")  # the flush's side checks first and is cancelled
    flusher = psycopg.connect(conninfo, autocommit=True)
    flusher.execute("SET deadlock_timeout = '20ms'")
    attempts: list[str] = []
    server_error: list[BaseException] = []

    def flush():
        attempts.append("flush")
        try:
            with flusher.transaction():
                flusher.execute(f"TRUNCATE {first}, {second}")  # locks `first`, then waits for `second`
        except psycopg.Error as error:
            raise CommandError("Database couldn't be flushed.") from error  # as Django's flush does

    def server_work():
        try:
            server.execute(f"SELECT * FROM {second}")  # holds `second`
            holding.set()
            waiting = "SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted"
            while not server.execute(waiting, [flusher.info.backend_pid]).fetchone():
                pass  # until the TRUNCATE holds `first` and waits for `second`
            server.execute(f"SELECT * FROM {first}")  # waits for `first`: the cycle
            server.commit()
        except BaseException as error:  # reported by the test's thread
            server_error.append(error)

    holding = threading.Event()
    thread = threading.Thread(target=server_work)
    thread.start()
    try:
        assert holding.wait(timeout=30)
        flush_retrying_deadlocks(flush)
        thread.join(timeout=30)
        assert not server_error, server_error
        assert attempts == ["flush", "flush"]  # cancelled once, then through
        with psycopg.connect(conninfo, autocommit=True) as reader:
            assert [reader.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in (first, second)] == [
                0,
                0,
            ]
    finally:
        server.close()
        flusher.close()
        with psycopg.connect(conninfo, autocommit=True) as cleanup:
            cleanup.execute(f"DROP TABLE IF EXISTS {first}, {second}")


def test_a_flush_that_fails_for_another_reason_is_not_tried_again():
    attempts: list[str] = []

    def flush():
        attempts.append("flush")
        raise CommandError("Database couldn't be flushed.") from ValueError("a missing table")

    with pytest.raises(CommandError):
        flush_retrying_deadlocks(flush)
    assert attempts == ["flush"]
