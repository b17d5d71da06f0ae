"""What the guard answers itself (the handler does not run): one shape, RFC 6750's style."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Answer:
    """The guard's own answer; the handler does not run."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes

    @classmethod
    def json(cls, status: int, body: dict[str, Any], headers: list[tuple[str, str]] | None = None) -> Answer:
        payload = json.dumps(body).encode()
        return cls(
            status,
            [("content-type", "application/json"), ("cache-control", "no-store"), *(headers or [])],
            payload,
        )


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def bearer_challenge(error: str, description: str, **params: str) -> str:
    """A `WWW-Authenticate: Bearer` value (RFC 6750 section 3)."""
    parts = [f'error="{_quoted(error)}"', f'error_description="{_quoted(description)}"']
    parts += [f'{name}="{_quoted(value)}"' for name, value in params.items()]
    return "Bearer " + ", ".join(parts)


def refusal(status: int, error: str, description: str, *, code: str | None = None) -> Answer:
    """An error answer in RFC 6750's style: `error` and `error_description` in the body (and in
    `WWW-Authenticate` for a 401), plus the gate's own code when there is one."""
    body: dict[str, Any] = {"error": error, "error_description": description}
    if code:
        body["reviewer_gate_code"] = code
    headers = [("www-authenticate", bearer_challenge(error, description))] if status == 401 else []
    return Answer.json(status, body, headers)
