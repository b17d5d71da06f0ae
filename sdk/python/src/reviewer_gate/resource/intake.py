"""The 202 mode: for callers that speak no TAC, the resource files the proposal itself over Reviewer's
REST intake, with its own registration's token, and the caller simply sends the same request again.

- The request id (also the task id) is derived from the exact request, its caller and its
  `Idempotency-Key` header: sending the same request again finds the same proposal (Reviewer's intake
  is idempotent on it), and its answer carries the decision once people made it.
- While people decide: 202, `Retry-After`, and a status URL the resource serves (`status`), reading
  the proposal with its own token (the caller has none).
- Once approved, the decision in the intake answer is verified by the gate against what was filed,
  then released by the guard (consumed online, run once). A second run of the same request is refused
  (409 `already_executed`): it released one execution.
- When policy allows the request at once, Reviewer consumes the approval in the intake request itself
  (`Prefer: consume`): the gate verifies it and the guard releases it with no consume request, so the
  protected call costs one request to Reviewer (and the outcome report after it).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

import rfc8785

from reviewer_gate.approval import CLOSED_WITHOUT_DECISION, ReviewerUnavailable, Throttled, build_request
from reviewer_gate.client import ReviewerClient
from reviewer_gate.decision import GateError, VerifiedDecision
from reviewer_gate.gate import Gate
from reviewer_gate.resource.answers import Answer, refusal
from reviewer_gate.resource.callers import Caller
from reviewer_gate.resource.routes import ProtectedRequest, Route, request_fingerprint

logger = logging.getLogger(__name__)


def intake_request_id(request: ProtectedRequest, caller: Caller) -> str:
    """The 202 mode's request id (also its task id): derived from the request, its caller and its
    `Idempotency-Key` header, so that sending the same request again finds the same proposal, and a
    caller who means a second, identical operation sends another `Idempotency-Key`."""
    material = rfc8785.dumps(
        {
            "request": request_fingerprint(request),
            "caller": caller.sub,
            "idempotency_key": request.header("idempotency-key") or "",
        }
    )
    return "rg-" + hashlib.sha256(material).hexdigest()[:40]


def action_of(route: Route, details: list[dict[str, Any]]) -> dict[str, Any]:
    """The action the 202 mode files: the tool, the operation's fields as its arguments (so policies
    read `args.amount`), the target."""
    tool = route.tool or details[0]["type"]
    detail = details[0]
    action: dict[str, Any] = {
        "tool": tool,
        "arguments": {key: value for key, value in detail.items() if key not in ("type", "locations")},
    }
    locations = detail.get("locations")
    if isinstance(locations, list) and len(locations) == 1:
        action["target"] = locations[0]
    elif locations:
        action["arguments"]["locations"] = locations
    return action


def intake_refusal(error: GateError) -> Answer:
    """A refusal in the 202 mode, where the caller presented nothing: the decision Reviewer answered
    cannot release this request."""
    if error.code in ("replayed", "consume_refused:consumed"):
        return refusal(
            409, "already_executed", "this request already ran once with its approval", code=error.code
        )
    if error.code in ("reviewer_unreachable", "keys_unavailable"):
        return refusal(
            503, "temporarily_unavailable", "Reviewer could not be reached; nothing ran", code=error.code
        )
    return refusal(403, "access_denied", error.message, code=error.code)


@dataclass(frozen=True)
class Decided:
    """A verified decision from the intake answer; `consumed`: Reviewer consumed it at intake for this
    resource (`Prefer: consume` applied), so the guard releases it without consuming it again."""

    decision: VerifiedDecision
    consumed: bool


class IntakeDoor:
    """Files a protected request as a proposal and finds its decision when the request comes again."""

    def __init__(self, *, client: ReviewerClient, gate: Gate, status_path: str, retry_after_seconds: int):
        self.client = client
        self.gate = gate
        self.status_path = status_path
        self.retry_after_seconds = retry_after_seconds

    def ask(
        self, request: ProtectedRequest, route: Route, details: list[dict[str, Any]], caller: Caller | None
    ) -> Answer | Decided:
        """An answer (pending, refused), or the verified decision for the guard to release."""
        if caller is None:
            return refusal(401, "invalid_request", "the caller is not authenticated")
        request_id = intake_request_id(request, caller)
        consequences = {key: details[0][key] for key in ("amount", "currency") if key in details[0]}
        principal = {"id": caller.sub, "display": caller.name} if caller.name else {"id": caller.sub}
        approval_request = build_request(
            action_of(route, details),
            summary=route.summary_of(details),
            principal=principal,
            request_id=request_id,
            consequences=consequences,
        )
        try:
            # The handler runs right after this answer when policy allowed: consumed at intake.
            submission = self.client.submit(approval_request, task_id=request_id, consume=True)
        except Throttled as error:
            retry = str(int(error.retry_after) or self.retry_after_seconds)
            answer = refusal(
                429, "slow_down", f"Reviewer is throttling this resource: {error.code}", code=error.code
            )
            return replace(answer, headers=[*answer.headers, ("retry-after", retry)])
        except ReviewerUnavailable as error:
            logger.warning("intake for %s failed: %s", request_id, error)
            return refusal(503, "temporarily_unavailable", "Reviewer could not be reached; nothing ran")
        except ValueError as error:  # Reviewer refused the proposal: the route's description is at fault
            logger.error("Reviewer refused the proposal for %s %s: %s", request.method, request.path, error)
            return refusal(502, "server_error", "Reviewer refused this resource's proposal; nothing ran")
        if submission.token is None:
            if submission.state in CLOSED_WITHOUT_DECISION:
                return refusal(
                    403,
                    "access_denied",
                    f"the approval request is {submission.state}; send an Idempotency-Key to ask again",
                    code=submission.state,
                )
            return self._pending(submission.proposal_id, submission.state, request_id)
        try:
            decision = self.gate.verify(
                submission.token,
                task_id=submission.task_id,
                request_id=submission.request_id,
                action_digest=submission.action_digest,
            )
        except GateError as error:
            return intake_refusal(error)
        return Decided(decision, consumed=submission.consumed)

    def _pending(self, proposal_id: str, state: str, request_id: str) -> Answer:
        status_url = self.status_path + quote(proposal_id, safe="")
        body = {
            "status": "pending",
            "state": state,
            "request_id": request_id,
            "proposal_id": proposal_id,
            "status_url": status_url,
            "error_description": "People must approve this request; send it again, unchanged, after "
            "Retry-After seconds",
        }
        return Answer.json(
            202, body, [("location", status_url), ("retry-after", str(self.retry_after_seconds))]
        )

    def status(self, proposal_id: str) -> Answer:
        """The state of a proposal this resource filed, read with its own token (a caller has none)."""
        if not proposal_id or "/" in proposal_id:
            return refusal(404, "not_found", "no such approval request")
        try:
            proposal = self.client.read_proposal(proposal_id)
        except ReviewerUnavailable:
            return refusal(503, "temporarily_unavailable", "Reviewer could not be reached")
        if proposal is None:
            return refusal(404, "not_found", "no such approval request")
        return Answer.json(200, {"proposal_id": proposal_id, "state": str(proposal.get("state") or "")})
