"""What an agent holds while it asks Reviewer: the request it builds, the submission, the approval it may act
on, and the two refusals (`NotApproved`, `ReviewerUnavailable`). `reviewer_gate.client` re-exports them."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import httpx

from reviewer_gate.decision import VerifiedDecision, action_digest

if TYPE_CHECKING:
    from reviewer_gate.client import ReviewerClient

# Proposal states after which no decision token will ever appear (DESIGN.md "The proposal lifecycle").
CLOSED_WITHOUT_DECISION = frozenset({"expired", "cancelled", "revoked", "superseded"})


class ReviewerUnavailable(Exception):
    """Reviewer could not be reached or kept answering 5xx after the retries."""


class Throttled(ReviewerUnavailable):
    """Reviewer answered 429: this agent (or its tenant) is over a quota, and nothing was stored. Raised
    at once, never retried by the client; send the same request again after `retry_after` seconds if
    you want to (a submit is idempotent on task and request id).

    code: "rate_limited", "tenant_rate_limited" (intake's token buckets), "too_many_open",
    "tenant_too_many_open" (the ceilings of proposals waiting for people), "too_many_waits" (decision
    waits); `retry_after`: the Retry-After header in seconds (0 when it had none)."""

    def __init__(self, code: str, message: str, retry_after: float):
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.retry_after = retry_after

    @classmethod
    def from_response(cls, response: httpx.Response) -> Throttled:
        try:
            retry_after = max(float(response.headers.get("Retry-After", "0")), 0.0)
        except ValueError:  # an HTTP date, which Reviewer does not send
            retry_after = 0.0
        try:
            error = response.json().get("error") or {}
        except (ValueError, AttributeError):
            error = {}
        return cls(str(error.get("code") or "throttled"), str(error.get("message") or ""), retry_after)


class NotApproved(Exception):
    """Nothing may be executed. `code` says why, `reason` is the reviewer's words when there are any.

    code: "rejected", "needs_info" (a verified decision that is not an approval), a proposal state
    ("expired", "cancelled", "revoked", "superseded", "denied"), "timeout" (the caller's deadline
    passed first), or a GateError code ("replayed", "consume_refused:revoked", ...).
    """

    def __init__(self, code: str, reason: str = "", *, decision: VerifiedDecision | None = None):
        super().__init__(f"{code}: {reason}" if reason else code)
        self.code = code
        self.reason = reason
        self.decision = decision


@dataclass(frozen=True)
class Submission:
    """What the agent asked for; the gate checks the decision against this, never against the answer."""

    task_id: str
    context_id: str
    request: dict[str, Any]
    proposal_id: str
    state: str
    # The signed decision when policy decided at intake (the intake answer's `token`), else None. It is
    # verified like a pulled one: the answer only carries it.
    token: str | None = None
    # Reviewer consumed that decision for this agent at intake (`Prefer: consume` applied): the agent
    # verifies it and acts, with no consume request. Never true for a replay's answer.
    consumed: bool = False

    @property
    def request_id(self) -> str:
        return str(self.request["request_id"])

    @property
    def action_digest(self) -> str:
        return str(self.request["action_digest"])


@dataclass(frozen=True)
class Approval:
    """A verified, consumed approval: execute `action` once, with `idempotency_key`, then `report`."""

    decision: VerifiedDecision
    action: dict[str, Any]  # the reviewer's edit when there was one (decision.edited), else what was asked
    submission: Submission
    client: ReviewerClient = field(repr=False)

    @property
    def idempotency_key(self) -> str:
        return self.decision.jti

    @property
    def edited(self) -> bool:
        return self.decision.edited

    def report(self, status: str, *, transaction_id: str | None = None, detail: str | None = None) -> bool:
        """Tell Reviewer how it ended: "succeeded", "failed" or "unknown" (best effort, never raises)."""
        return self.client.gate.report_outcome(
            self.decision, status, transaction_id=transaction_id, detail=detail
        )

    async def areport(
        self, status: str, *, transaction_id: str | None = None, detail: str | None = None
    ) -> bool:
        """`report` for asyncio code (the HTTP call runs in a thread)."""
        return await asyncio.to_thread(self.report, status, transaction_id=transaction_id, detail=detail)


_current_approval: ContextVar[Approval | None] = ContextVar("reviewer_gate_approval", default=None)


def current_approval() -> Approval | None:
    """The approval a tool is running under, inside a tool called by one of the adapters (LangGraph,
    OpenAI Agents): use `current_approval().idempotency_key` as the downstream idempotency key."""
    return _current_approval.get()


@contextmanager
def running_under(approval: Approval) -> Iterator[None]:
    """Make `approval` the current one while a gated tool runs (what the adapters do)."""
    reset = _current_approval.set(approval)
    try:
        yield
    finally:
        _current_approval.reset(reset)


def still_waiting(state: str, started: float, timeout: float | None) -> float:
    """Seconds waited so far; raises NotApproved when no decision will come, or the deadline passed."""
    if state in CLOSED_WITHOUT_DECISION:
        raise NotApproved(state, f"the proposal is {state}; nothing may be executed")
    elapsed = time.monotonic() - started
    if timeout is not None and elapsed >= timeout:
        raise NotApproved("timeout", f"no decision after {timeout:.0f}s; nothing may be executed")
    return elapsed


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def build_request(
    action: dict[str, Any],
    *,
    summary: str,
    principal: dict[str, Any],
    agent_version: str = "",
    consequences: dict[str, Any] | None = None,
    diff: list[dict[str, Any]] | None = None,
    evidence: list[dict[str, Any]] | None = None,
    ttl_seconds: int | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """The approval request of DESIGN.md "A2A contract" step 1, with a fresh request id and the digest."""
    request: dict[str, Any] = {
        "request_id": request_id or str(uuid.uuid4()),
        "summary": summary,
        "action": action,
        "action_digest": action_digest(action),
        "principal": principal,
        "agent_version": agent_version,
        "consequences": consequences or {},
        "diff": diff or [],
        "evidence": evidence or [],
    }
    if ttl_seconds is not None:
        request["expires_at"] = rfc3339(datetime.now(UTC) + timedelta(seconds=ttl_seconds))
    return request
