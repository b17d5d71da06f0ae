"""a2a-rust's approval extension, `https://a2a-rust.com/extensions/approval/v1`, with Reviewer as the
approver (docs/agents/a2a-rust.md).

An a2a-rust agent parks its task in input-required with the request under
`metadata["a2a-rust.com/approval"]` of the status message: `requestId`, `summary`, `digest`
(`sha256:` + hex of SHA-256 over the RFC 8785 JSON of the action) and `requestedBy` (the authenticated
caller whose run asks). The request names no action; Reviewer reads one when the agent puts it beside
the extension's members (`action`, which a2a-rust's reader ignores), recomputes its digest and refuses
a mismatch. Without it the proposal's action is opaque: the tool OPAQUE_TOOL and the digest, which
binds the agent's executor to the action it hashed but shows reviewers only the summary.

The decision goes back on the continuing message as the extension's `{requestId, decision, digest,
comment}`, with Reviewer's signed decision beside it under Reviewer's own extension.
"""

import re
from typing import Any

import pydantic
import rfc8785

from approvals.canonical import action_digest
from approvals.models import Decision, Proposal
from approvals.schemas import ProposalSubmission, first_problem
from lib.errors import IntakeError

RUST_EXTENSION_URI = "https://a2a-rust.com/extensions/approval/v1"
RUST_METADATA_KEY = "a2a-rust.com/approval"
# The tool of a proposal whose request carried no action: policy can match it by this name and the agent.
OPAQUE_TOOL = "a2a-rust.approval"
# A request whose run had no authenticated caller names no requester (a2a-rust: `requestedBy` absent).
NO_REQUESTER = "a2a-rust:unauthenticated"
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class RustRequestError(IntakeError):
    """The extension's request is malformed, or its action does not hash to its digest."""


def _text(request: dict[str, Any], key: str, limit: int, *, required: bool = True) -> str:
    value = request.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value or len(value) > limit:
        raise RustRequestError(
            "invalid", f"{key} must be a string of 1 to {limit} characters", f"request.{key}"
        )
    return value


def rust_request(task_id: str, context_id: str, metadata: dict[str, Any]) -> ProposalSubmission | None:
    """The a2a-rust approval request parked in this status message's metadata, as a Reviewer
    submission; None when the message carries none. Raises RustRequestError."""
    request = metadata.get(RUST_METADATA_KEY)
    if request is None:
        return None
    if not isinstance(request, dict):
        raise RustRequestError("invalid", "the a2a-rust approval request is an object", "request")
    request_id = _text(request, "requestId", 200)
    summary = _text(request, "summary", 500)
    digest = request.get("digest")
    if not isinstance(digest, str) or not DIGEST.match(digest):
        raise RustRequestError(
            "invalid", "digest must be sha256: and 64 lower-case hex digits", "request.digest"
        )
    requested_by = _text(request, "requestedBy", 200, required=False)
    action = request.get("action")
    if action is None:
        action = {"tool": OPAQUE_TOOL, "digest": digest}
    else:
        if not isinstance(action, dict) or action.get("tool") == OPAQUE_TOOL:
            raise RustRequestError(
                "invalid", "action is the object the digest was computed over", "request.action"
            )
        try:
            recomputed = action_digest(action)
        except rfc8785.CanonicalizationError as error:
            raise RustRequestError(
                "bad_action", f"action cannot be canonicalized: {error}", "request.action"
            ) from error
        if recomputed != digest:
            raise RustRequestError(
                "digest_mismatch",
                f"digest does not match the action: Reviewer computed {recomputed} (RFC 8785 + SHA-256)",
                "request.digest",
            )
    try:
        return ProposalSubmission.model_validate(
            {
                "task_id": task_id,
                "context_id": context_id,
                "request": {
                    "request_id": request_id,
                    "summary": summary,
                    "action": action,
                    "action_digest": action_digest(action),
                    "principal": {"id": requested_by or NO_REQUESTER, "display": requested_by},
                    # Not an a2a-rust member: the registration's slug, which listing parked tasks needs
                    # (approvals/a2a/parked_tasks.py); a2a-rust's reader ignores it.
                    "agent": request.get("agent") or "",
                },
            }
        )
    except pydantic.ValidationError as error:
        field, message = first_problem(error.errors())
        raise RustRequestError("invalid", message, field) from error


def extension_digest(proposal: Proposal) -> str:
    """The digest the agent's request carried: the action's own, or the one an opaque action keeps."""
    if proposal.tool == OPAQUE_TOOL:
        return str(proposal.action.get("digest", ""))
    return proposal.action_digest


def rust_decision(decision: Decision) -> dict[str, Any] | None:
    """The extension's decision for a Reviewer decision, or None when it has none to say.

    - approved: `approve`, echoing the request's id and digest;
    - rejected (by people or policy): `deny` with the reason as the comment;
    - a reviewer's edit: `deny` of the request the agent made (a2a-rust has no way to carry another
      action, and its gate would refuse the edit's digest), saying so in the comment;
    - a reviewer's question: None (a2a-rust has no answer to a question): the continuation carries the
      question and Reviewer's token only, and the agent's executor finds no decision.
    """
    proposal = decision.proposal
    if decision.kind == Decision.Kind.NEEDS_INFO:
        return None
    asked = proposal
    while asked.supersedes is not None:
        asked = asked.supersedes
    if asked.pk != proposal.pk:
        return {
            "requestId": asked.request_id,
            "decision": "deny",
            "digest": extension_digest(asked),
            "comment": "A reviewer in Reviewer changed the action; this request was not approved as asked.",
        }
    answer = {
        "requestId": proposal.request_id,
        "decision": "approve" if decision.kind == Decision.Kind.APPROVED else "deny",
        "digest": extension_digest(proposal),
    }
    if decision.reason:
        answer["comment"] = decision.reason
    return answer
