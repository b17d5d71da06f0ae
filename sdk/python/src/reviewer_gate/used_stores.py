"""Single use: where the gate records each decision's jti, so that a token releases one action once."""

import threading
import time
from pathlib import Path
from typing import Protocol

from reviewer_gate.sqlite_files import ThreadConnections


class UsedDecisionStore(Protocol):
    def claim(self, jti: str, expires_at: int) -> bool:
        """Record jti as used. True only the first time it is claimed."""


class MemoryUsedStore:
    """Single use within one process (tests, single-process agents that may forget on restart)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._used: dict[str, int] = {}

    def claim(self, jti: str, expires_at: int) -> bool:
        with self._lock:
            if jti in self._used:
                return False
            self._used[jti] = expires_at
            return True


class SQLiteUsedStore:
    """Single use across threads and processes sharing one SQLite file.

    The primary key makes the claim atomic: `INSERT OR IGNORE` inserts exactly once, whoever races.
    Rows are kept a day past the token's expiry (the gate refuses an expired token before it gets
    here, so forgetting them later cannot re-open a decision).
    """

    RETAIN_AFTER_EXPIRY_SECONDS = 86400

    def __init__(self, path: str | Path):
        self.path = str(path)
        # IMMEDIATE: the claim's transaction takes the write lock with its first statement.
        self._connections = ThreadConnections(path, isolation_level="IMMEDIATE")
        connection = self._connections.connection()
        connection.execute(
            "CREATE TABLE IF NOT EXISTS used_decisions ("
            " jti TEXT PRIMARY KEY, expires_at INTEGER NOT NULL, claimed_at INTEGER NOT NULL)"
        )
        connection.execute(
            "CREATE INDEX IF NOT EXISTS used_decisions_expires_at ON used_decisions (expires_at)"
        )

    def claim(self, jti: str, expires_at: int) -> bool:
        now = int(time.time())
        # One transaction (one commit, one fsync) for the claim and the clean-up of old rows.
        with self._connections.transaction() as connection:
            cursor = connection.execute(
                "INSERT OR IGNORE INTO used_decisions (jti, expires_at, claimed_at) VALUES (?, ?, ?)",
                (jti, int(expires_at), now),
            )
            connection.execute(
                "DELETE FROM used_decisions WHERE expires_at < ?",
                (now - self.RETAIN_AFTER_EXPIRY_SECONDS,),
            )
        return cursor.rowcount == 1
