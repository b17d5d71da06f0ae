"""The Access Request and Approval Profile on Reviewer's proposals (docs/authzen.md): a requestable
denial turned into a proposal through intake, and the proposal read back as the profile's task.

The task handle is the proposal's id; its status is the proposal's state collapsed into the profile's
statuses (STATUS); an approved task's result is the `reevaluate` completion whose approval id is the
decision's jti.
"""

import uuid
from typing import Any

from django.conf import settings
from django.core import signing

from approvals.models import Agent, Decision, Proposal
from approvals.states import State
from authzen.evaluation import (
    REQUEST_CONTEXT_SALT,
    REQUESTABLE_SECONDS,
    TASK_PREFIX,
    submission_for,
    take_in,
)
from authzen.mapping import AccessQuestion, AuthZenRefusal

PROBLEM = "urn:openid:authzen:access-request:error:"

STATUS: dict[str, str] = {
    State.PROPOSED: "pending",
    State.AWAITING_REVIEW: "pending",
    # A reviewer's question has no channel in the profile: the task waits until it expires or is
    # answered through Reviewer's own API.
    State.INFO_REQUESTED: "pending",
    State.ALLOWED: "approved",
    State.APPROVED: "approved",
    # Released and then used: the request was approved; re-evaluation answers false from now on.
    State.EXECUTING: "approved",
    State.SUCCEEDED: "approved",
    State.FAILED: "approved",
    State.UNKNOWN: "approved",
    State.DENIED: "denied",
    State.REJECTED: "denied",
    State.EXPIRED: "expired",
    State.CANCELLED: "cancelled",
    State.REVOKED: "cancelled",
    # A reviewer edited the arguments: what the PEP asked for was not approved as asked.
    State.SUPERSEDED: "cancelled",
}


class ProblemError(Exception):
    """An RFC 9457 problem the profile names (`type` is PROBLEM + code)."""

    def __init__(self, status: int, code: str, detail: str):
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail

    def as_dict(self) -> dict[str, Any]:
        return {
            "type": f"{PROBLEM}{self.code}",
            "title": self.code.replace("_", " "),
            "status": self.status,
            "detail": self.detail,
        }


def status_endpoint(proposal: Proposal) -> str:
    return f"{settings.REVIEWER_ISSUER}/access/v1/requests/{proposal.id}"


def bound_evaluation(agent: Agent, question: AccessQuestion, denial: Any) -> str:
    """The evaluation id of the requestable denial this submission answers, once its binding holds:
    the request_context Reviewer signed names this agent, this principal and this exact action."""
    if not isinstance(denial, dict):
        raise ProblemError(400, "invalid_denial_binding", "denial is required and is an object")
    hint = denial.get("access_request")
    if not isinstance(hint, dict) or hint.get("requestable") is not True:
        raise ProblemError(
            400, "not_requestable", "denial.access_request.requestable is not true: nothing to request"
        )
    request_context = hint.get("request_context")
    if not isinstance(request_context, str):
        # Reviewer keeps nothing for a requestable denial, so an evaluation id alone resolves to
        # nothing: the signed request_context is the binding.
        raise ProblemError(400, "invalid_denial_binding", "denial.access_request.request_context is required")
    try:
        bound = signing.loads(request_context, salt=REQUEST_CONTEXT_SALT, max_age=REQUESTABLE_SECONDS)
    except signing.SignatureExpired as error:
        raise ProblemError(410, "expired_denial", "the requestable denial has expired") from error
    except signing.BadSignature as error:
        raise ProblemError(
            400, "invalid_denial_binding", "request_context was not issued by Reviewer"
        ) from error
    if (
        bound.get("a") != agent.pk
        or bound.get("p") != question.principal_id
        or bound.get("d") != question.digest
    ):
        raise ProblemError(
            400,
            "invalid_denial_binding",
            "the denial was for another subject, action or resource than this request",
        )
    named = denial.get("evaluation_id")
    if named is not None and named != bound.get("e"):
        raise ProblemError(400, "invalid_denial_binding", "evaluation_id is not the denial's")
    return str(bound["e"])


def submit_access_request(
    agent: Agent, question: AccessQuestion, body: dict[str, Any]
) -> tuple[Proposal, bool]:
    """The proposal for an access request (idempotent: the same denial submitted again is the same
    task). Raises ProblemError, AuthZenRefusal or ServiceError."""
    if "items" in body:
        raise AuthZenRefusal(
            400, "invalid", "bundled access requests (items) are not supported: one request each", "items"
        )
    evaluation_id = bound_evaluation(agent, question, body.get("denial"))
    evidence = []
    justification = question.context.get("business_justification")
    if isinstance(justification, str) and justification:
        evidence.append({"title": "Business justification (from the PEP)", "excerpt": justification[:2000]})
    return take_in(agent, submission_for(question, evaluation_id, evidence=evidence))


def task_for(agent: Agent, proposal_id: uuid.UUID) -> Proposal:
    proposal = (
        Proposal.objects.filter(pk=proposal_id, agent=agent, task_id__startswith=TASK_PREFIX)
        .select_related("agent")
        .first()
    )
    if proposal is None:
        raise ProblemError(404, "unknown_task", "no such task for this PEP")
    return proposal


def task_answer(proposal: Proposal) -> dict[str, Any]:
    """The profile's task (and, when approved, its `reevaluate` result) for a proposal."""
    status = STATUS.get(proposal.state, "failed")
    answer = {
        "task": {
            "id": str(proposal.id),
            "status": status,
            "status_endpoint": status_endpoint(proposal),
            "expires_at": proposal.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "links": {"ticket": f"{settings.REVIEWER_ISSUER}/proposals/{proposal.id}/"},
        }
    }
    if proposal.state == State.SUPERSEDED:
        answer["task"]["display"] = {
            "description": "a reviewer edited the request: it was not approved as asked"
        }
    if status == "approved":
        decision = Decision.objects.get(proposal=proposal)
        answer["result"] = {
            "mode": "reevaluate",
            "approval": {
                "id": str(decision.jti),
                "approved_at": (proposal.decided_at or proposal.created_at).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "approved_until": decision.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
            "approval_context": {"approval_id": str(decision.jti)},
        }
    return answer
