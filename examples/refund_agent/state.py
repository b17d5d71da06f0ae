"""The agent's own durable memory, in one SQLite file under --state-dir.

- `approval_requests`: what the agent asked Reviewer for, per task; kept by
  `reviewer_gate.a2a.SQLiteRequestStore` in the same file.
- `cancelled_tasks`: tasks cancelled here; checked right before consuming and before the side effect.
- `executions`: one row per approved decision that reached execution: its idempotency key and how far
  it got (executing → succeeded | failed | unknown), written before and after the side effect.

Every method is blocking: call them with `asyncio.to_thread` from the executor.
"""

import sqlite3
import time
from pathlib import Path

from reviewer_gate.sqlite_files import ThreadConnections

_SCHEMA = """
CREATE TABLE IF NOT EXISTS cancelled_tasks (
    task_id TEXT PRIMARY KEY,
    cancelled_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS executions (
    jti TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    request_id TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    phase TEXT NOT NULL,
    transaction_id TEXT,
    detail TEXT,
    updated_at REAL NOT NULL
);
"""


class AgentState:
    def __init__(self, path: str | Path):
        self.path = str(path)
        # A connection kept open per thread, each call one transaction (reviewer_gate.sqlite_files).
        self._connections = ThreadConnections(path)
        self._connections.connection().executescript(_SCHEMA)

    # cancellation ----------------------------------------------------------------------------

    def mark_cancelled(self, task_id: str) -> None:
        with self._connections.transaction() as connection:
            connection.execute(
                "INSERT OR IGNORE INTO cancelled_tasks (task_id, cancelled_at) VALUES (?, ?)",
                (task_id, time.time()),
            )

    def is_cancelled(self, task_id: str) -> bool:
        with self._connections.transaction() as connection:
            row = connection.execute("SELECT 1 FROM cancelled_tasks WHERE task_id = ?", (task_id,)).fetchone()
        return row is not None

    # executions ------------------------------------------------------------------------------

    def record_execution(
        self,
        *,
        jti: str,
        task_id: str,
        request_id: str,
        idempotency_key: str,
        phase: str,
        transaction_id: str | None = None,
        detail: str | None = None,
    ) -> None:
        with self._connections.transaction() as connection:
            connection.execute(
                "INSERT INTO executions"
                " (jti, task_id, request_id, idempotency_key, phase, transaction_id, detail, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (jti) DO UPDATE SET phase = excluded.phase,"
                " transaction_id = excluded.transaction_id, detail = excluded.detail,"
                " updated_at = excluded.updated_at",
                (jti, task_id, request_id, idempotency_key, phase, transaction_id, detail, time.time()),
            )

    def execution(self, jti: str) -> dict | None:
        with self._connections.transaction() as connection:
            cursor = connection.cursor()
            cursor.row_factory = sqlite3.Row  # this read's rows only: the connection is kept and shared
            row = cursor.execute("SELECT * FROM executions WHERE jti = ?", (jti,)).fetchone()
        return dict(row) if row else None
