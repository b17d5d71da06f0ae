"""Where an agent keeps what it asked Reviewer for, per task: the gate checks a decision against this
record, never against the message that carried it (reviewer_gate.a2a, which re-exports these)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from reviewer_gate.sqlite_files import ThreadConnections


@dataclass(frozen=True)
class AskedRequest:
    """What the agent asked for on one task: the gate checks decisions against this, never the message."""

    task_id: str
    context_id: str
    request: dict[str, Any]

    @property
    def request_id(self) -> str:
        return str(self.request["request_id"])

    @property
    def action(self) -> dict[str, Any]:
        action: dict[str, Any] = self.request["action"]
        return action

    @property
    def action_digest(self) -> str:
        return str(self.request["action_digest"])


class RequestStore(Protocol):
    def save_request(self, task_id: str, context_id: str, request: dict[str, Any]) -> None: ...

    def current_request(self, task_id: str) -> AskedRequest | None: ...


class SQLiteRequestStore:
    """The requests the agent asked for, per task, in one SQLite file (safe to share between processes).

    Written before the task is parked, so a restart during the wait loses nothing. A request that
    `supersedes` another (the answer to a question) makes the old one stop being current.
    """

    SCHEMA = """
    CREATE TABLE IF NOT EXISTS approval_requests (
        request_id TEXT PRIMARY KEY,
        task_id TEXT NOT NULL,
        context_id TEXT NOT NULL,
        request_json TEXT NOT NULL,
        created_at REAL NOT NULL,
        superseded_by TEXT
    );
    CREATE INDEX IF NOT EXISTS approval_requests_task ON approval_requests (task_id, created_at);
    """

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._connections = ThreadConnections(path)
        self._connections.connection().executescript(self.SCHEMA)

    def save_request(self, task_id: str, context_id: str, request: dict[str, Any]) -> None:
        with self._connections.transaction() as connection:
            connection.execute(
                "INSERT INTO approval_requests (request_id, task_id, context_id, request_json, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (request["request_id"], task_id, context_id, json.dumps(request), time.time()),
            )
            if request.get("supersedes"):
                connection.execute(
                    "UPDATE approval_requests SET superseded_by = ? WHERE request_id = ? AND task_id = ?",
                    (request["request_id"], request["supersedes"], task_id),
                )

    def current_request(self, task_id: str) -> AskedRequest | None:
        """The task's newest request that nothing superseded: the only one a decision may answer."""
        with self._connections.transaction() as connection:
            row = connection.execute(
                "SELECT context_id, request_json FROM approval_requests"
                " WHERE task_id = ? AND superseded_by IS NULL ORDER BY created_at DESC LIMIT 1",
                (task_id,),
            ).fetchone()
        if row is None:
            return None
        return AskedRequest(task_id=task_id, context_id=row[0], request=json.loads(row[1]))
