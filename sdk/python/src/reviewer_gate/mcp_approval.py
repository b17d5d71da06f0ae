"""How the MCP gateway shows a gated call's approval to the MCP client, by what the client supports.

Three paths, chosen per call from the client's declared capabilities and protocol version:

- `input-required` (protocol 2026-07-28, client declares URL elicitation): the call answers at once
  with an `InputRequiredResult` (SEP-2322) whose one input request is a URL-mode elicitation of the
  proposal's page in Reviewer, and an opaque `request_state`. The client shows the link; when it
  retries the call with the user's answer and that state, the gateway waits for the decision
  (with progress notifications) and runs the tool on an approval. Declined or cancelled: nothing runs.
- `url-elicitation` (handshake protocols up to 2025-11-25, client declares URL elicitation): the
  gateway sends `elicitation/create` in URL mode with the proposal's page while it waits, and
  `notifications/elicitation/complete` once the decision is in. Declined or cancelled before the
  decision: nothing runs.
- `progress` (every other client): the call waits, with progress notifications when the client asked
  for them (a progress token), as before.

MCP Tasks (2025-11-25's task-augmented `tools/call`) are not offered: the official `mcp` SDK this
package depends on (2.3) has no client or server support for them, and 2026-07-28 replaced the
pattern with `input_required`, which is the first path above.

A URL elicitation only shows the page: the decision is the reviewers', made in Reviewer, and the
tool runs only on a signed approval that the gate verified and that was consumed, whatever the client
answers. Which path a call took is logged and returned in the result's `_meta` (APPROVAL_PATH_META).
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from reviewer_gate.client import Submission

APPROVAL_PATH_META = "io.github.reviewer/approval-path"
ELICITATION_KEY = "reviewer-approval"  # the key of the one input request an input_required answer carries
INPUT_REQUIRED, URL_ELICITATION, PROGRESS, AT_INTAKE = (
    "input-required",
    "url-elicitation",
    "progress",
    "intake",
)
PENDING_MAX = 1000  # approvals waiting for a client's retry; the oldest is dropped past it
PENDING_SECONDS = 24 * 3600  # a retry later than this finds nothing (Reviewer's proposals expire sooner)


def approval_path(ctx: ServerRequestContext[Any]) -> str:
    """The path this call's client gets (see the module doc)."""
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities else None
    url_mode = bool(elicitation and elicitation.url)
    if url_mode and ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return INPUT_REQUIRED
    if url_mode and ctx.session.can_send_request:
        return URL_ELICITATION
    return PROGRESS


def client_identity(ctx: ServerRequestContext[Any]) -> dict[str, str]:
    """Who is calling: the MCP client's name, title and version as it introduced itself."""
    info = ctx.session.client_params.client_info if ctx.session.client_params else None
    name = (info.name if info else "") or "unknown MCP client"
    return {
        "name": name[:100],
        "title": ((info.title if info else None) or name)[:100],
        "version": ((info.version if info else None) or "")[:50],
    }


def page_url(reviewer_url: str, proposal_id: str) -> str:
    return f"{reviewer_url.rstrip('/')}/proposals/{proposal_id}/"


def elicitation_message(tool: str, server: str, summary: str) -> str:
    return f"A reviewer must approve {tool} on {server} before it runs: {summary}"[:1000]


def url_elicitation(message: str, url: str, elicitation_id: str) -> types.ElicitRequest:
    return types.ElicitRequest(
        params=types.ElicitRequestURLParams(message=message, url=url, elicitation_id=elicitation_id)
    )


@dataclass(frozen=True)
class Pending:
    """An approval the gateway asked a 2026-07-28 client to show, waiting for that client's retry."""

    submission: Submission
    tool: str  # the tool the client called (the upstream's name)
    arguments: dict[str, Any]
    created: float


class PendingApprovals:
    """request_state -> Pending, in memory: the state is a random single-use key, never data the
    client could forge or replay onto another call."""

    def __init__(self) -> None:
        self._items: OrderedDict[str, Pending] = OrderedDict()

    def put(self, submission: Submission, tool: str, arguments: dict[str, Any]) -> str:
        state = secrets.token_urlsafe(24)
        self._items[state] = Pending(submission, tool, dict(arguments), time.monotonic())
        while len(self._items) > PENDING_MAX:
            self._items.popitem(last=False)
        return state

    def take(self, state: str) -> Pending | None:
        pending = self._items.pop(state, None)
        if pending is None or time.monotonic() - pending.created > PENDING_SECONDS:
            return None
        return pending


class BadRetry(ValueError):
    """A retry of an input_required call that cannot be honoured; the message says why."""


def answer_of(params: types.CallToolRequestParams) -> str:
    """The user's answer to the URL elicitation in a retried call: accept, decline or cancel."""
    responses = params.input_responses or {}
    response = responses.get(ELICITATION_KEY) if isinstance(responses, dict) else None
    action = getattr(response, "action", None) if response is not None else None
    if isinstance(response, dict):
        action = response.get("action")
    if action not in ("accept", "decline", "cancel"):
        raise BadRetry(
            f"the retry carries no answer to the elicitation {ELICITATION_KEY!r} "
            "(an elicitation result with action accept, decline or cancel)"
        )
    return str(action)
