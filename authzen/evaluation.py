"""Answering one access evaluation with Reviewer's policy and people (docs/authzen.md).

- policy allows: the request is taken in through intake (an allowed proposal with its signed decision)
  and the decision is consumed in the same answer: `true` releases exactly one execution;
- policy denies: taken in the same way (a denied proposal, its signed rejection): `false`;
- policy wants people: nothing is stored; `false` with the Access Request and Approval Profile's
  requestable denial, bound to this exact request by a signed `request_context`;
- a re-evaluation carrying an approval reference: `true` once, for the very request that was approved,
  consuming the decision; `false` with the reason otherwise (consumed, expired, revoked, another request).

Every write goes through the approval services (intake, consume), in their own transactions and with
their audit events; the requestable denial is a read.
"""

import uuid
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core import signing

from approvals.a2a.push import submit
from approvals.models import Agent, Decision, Proposal
from approvals.policy.evaluation import (
    active_versions_for,
    classified_target_key,
    context_for_proposal,
    evaluate,
)
from approvals.schemas import ProposalSubmission
from approvals.services.decisions import consume_decision
from approvals.states import State
from authzen.mapping import AccessQuestion
from lib.errors import ConsumeRefused

# The proposals AuthZEN makes are recognised by their task id (one evaluation, one task).
TASK_PREFIX = "authzen:"
# How long a requestable denial may be turned into an access request.
REQUESTABLE_SECONDS = 600
REQUEST_CONTEXT_SALT = "authzen.request_context"
VIA = "authzen"


def access_request_endpoint() -> str:
    return f"{settings.REVIEWER_ISSUER}/access/v1/requests"


def task_id_for(evaluation_id: str) -> str:
    return f"{TASK_PREFIX}{evaluation_id}"


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def policy_outcome(agent: Agent, question: AccessQuestion) -> str:
    """What the tenant's active policy says of this request (allow, deny, require_approval), read as
    intake would read it, without storing anything: a requestable denial leaves no row behind."""
    versions = active_versions_for(agent.tenant)
    sample = Proposal(
        tenant=agent.tenant,
        agent=agent,
        tool=question.action["tool"],
        action=question.action,
        principal_id=question.principal_id,
        principal_display=question.principal_display,
        consequences=question.consequences,
        target_key=classified_target_key(question.action, agent.slug, versions),
    )
    context = context_for_proposal(sample, versions=versions)
    return evaluate(agent.tenant, versions, context).outcome


def submission_for(
    question: AccessQuestion, evaluation_id: str, *, evidence: list[dict[str, Any]] | None = None
) -> ProposalSubmission:
    return ProposalSubmission.model_validate(
        {
            "task_id": task_id_for(evaluation_id),
            "request": {
                "request_id": evaluation_id,
                "summary": question.summary,
                "action": question.action,
                "action_digest": question.digest,
                "principal": {"id": question.principal_id, "display": question.principal_display},
                "consequences": question.consequences,
                "evidence": evidence or [],
            },
        }
    )


def take_in(agent: Agent, submission: ProposalSubmission) -> tuple[Proposal, bool]:
    """Intake, as the REST API and the push webhook call it (a refusal is recorded in the trail)."""
    return submit(agent, submission, via=VIA)


def evaluate_access(agent: Agent, question: AccessQuestion) -> dict[str, Any]:
    """The AuthZEN Decision for one evaluation. Raises ServiceError (a halt, a quota) for the caller to
    answer as an error."""
    if question.approval_id:
        return reevaluate(agent, question)
    evaluation_id = f"eval_{uuid.uuid4().hex}"
    if policy_outcome(agent, question) == "require_approval":
        return requestable_denial(agent, question, evaluation_id)
    proposal, _ = take_in(agent, submission_for(question, evaluation_id))
    return answer_for(agent, question, proposal, evaluation_id)


def answer_for(
    agent: Agent, question: AccessQuestion, proposal: Proposal, evaluation_id: str
) -> dict[str, Any]:
    """The Decision for a proposal intake just stored (policy may have changed since the read above:
    intake's own evaluation is the one that counts)."""
    base = {"evaluation_id": evaluation_id, "evaluated_at": now_text(), "proposal_id": str(proposal.id)}
    if proposal.state == State.DENIED:
        decision = Decision.objects.get(proposal=proposal)
        return {
            "decision": False,
            "context": {**base, "reason": "denied_by_policy", "decision_token": decision.token},
        }
    if proposal.state == State.ALLOWED:
        return released(agent, Decision.objects.get(proposal=proposal), base)
    return requestable_denial(agent, question, evaluation_id)


def released(agent: Agent, decision: Decision, base: dict[str, Any]) -> dict[str, Any]:
    """`true` is the release of one execution: the decision is consumed before the answer leaves, so a
    PEP that evaluates twice, or two PEPs, never both act on one approval."""
    try:
        consume_decision(agent, decision.jti, rev=decision.rev)
    except ConsumeRefused as refusal:
        return {"decision": False, "context": {**base, "reason": f"approval_{refusal.code}"}}
    return {
        "decision": True,
        "context": {
            **base,
            "approval": {
                "id": str(decision.jti),
                "approved_until": decision.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
            # Reviewer's signed decision (docs/agents/decision-token.md): evidence the PEP may keep and
            # verify offline; its jti is the idempotency key for the call it now forwards, and the
            # path to report the outcome (POST /api/v1/decisions/<jti>/outcome).
            "decision_token": decision.token,
        },
    }


def requestable_denial(agent: Agent, question: AccessQuestion, evaluation_id: str) -> dict[str, Any]:
    request_context = signing.dumps(
        {"e": evaluation_id, "a": agent.pk, "d": question.digest, "p": question.principal_id},
        salt=REQUEST_CONTEXT_SALT,
        compress=True,
    )
    return {
        "decision": False,
        "context": {
            "evaluation_id": evaluation_id,
            "evaluated_at": now_text(),
            "reason": "approval_required",
            "access_request": {
                "requestable": True,
                "endpoint": access_request_endpoint(),
                "reason": "reviewer_approval_required",
                "expires_in": REQUESTABLE_SECONDS,
                "request_context": request_context,
            },
        },
    }


def reevaluate(agent: Agent, question: AccessQuestion) -> dict[str, Any]:
    """After approval: `true` exactly for the request that was approved (same agent, principal and
    action digest), consuming the decision; `false` with the reason for anything else."""
    base = {"evaluated_at": now_text()}
    try:
        jti = uuid.UUID(question.approval_id)
    except ValueError:
        jti = None
    decision = (
        Decision.objects.select_related("proposal")
        .filter(jti=jti, proposal__agent=agent, proposal__task_id__startswith=TASK_PREFIX)
        .first()
        if jti
        else None
    )
    if decision is None:
        return {"decision": False, "context": {**base, "reason": "unknown_approval"}}
    proposal = decision.proposal
    if proposal.action_digest != question.digest or proposal.principal_id != question.principal_id:
        # An approval of one request never answers for another (confused deputy, request substitution).
        return {"decision": False, "context": {**base, "reason": "approval_for_another_request"}}
    base["proposal_id"] = str(proposal.id)
    base["evaluation_id"] = proposal.request_id
    return released(agent, decision, base)
