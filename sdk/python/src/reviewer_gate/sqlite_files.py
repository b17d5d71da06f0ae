"""The SQLite files an agent keeps (used decisions, asked requests): one open connection per thread.

Why open connections are kept. The files are in WAL mode (readers and one writer at a time, across the
agent's threads and processes). In that mode the last connection to close a database checkpoints it:
it copies the WAL into the database, syncs both and deletes the WAL. A store that opened and closed a
connection for every call paid that checkpoint, and the open, on every call: strace of the demo refund
agent counted about 39 fsyncs per refund before (Reviewer's bench/README.md, R1), most of them checkpoints.
Kept open, a commit syncs the WAL once and the checkpoint runs when the WAL has grown (SQLite's
automatic checkpoint, every 1,000 pages).

Why one per thread: a sqlite3 connection stays on the thread that opened it, and an async agent calls
its stores from `asyncio.to_thread`'s worker threads. Each store has its own connections, closed with
the store (or the thread) when it is collected.

Durability is unchanged: `synchronous = FULL`, so each commit's WAL is synced before the commit
returns, and a decision claimed or a request saved survives a kill -9 and a power cut alike.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

# How long a write waits for another thread's or process's write to finish (sqlite3's own default is 5 s,
# which failed writes under the load test).
BUSY_TIMEOUT_SECONDS = 30


class ThreadConnections:
    """Connections to one SQLite file, one per thread, opened on the thread's first call."""

    def __init__(
        self, path: str | Path, *, isolation_level: Literal["DEFERRED", "IMMEDIATE"] | None = "DEFERRED"
    ):
        self.path = str(path)
        self._isolation_level = isolation_level
        self._local = threading.local()
        # Persistent in the file: set once, it holds for every connection and process.
        self.connection().execute("PRAGMA journal_mode=WAL")

    def connection(self) -> sqlite3.Connection:
        """This thread's connection, outside any transaction."""
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=self._isolation_level
            )
            connection.execute("PRAGMA synchronous=FULL")
            self._local.connection = connection
        elif connection.in_transaction:
            # Only if a caller's rollback itself failed: never start the next call inside its transaction.
            connection.rollback()
        return connection

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One transaction on this thread's connection: committed on success, rolled back on error."""
        connection = self.connection()
        with connection:
            yield connection
