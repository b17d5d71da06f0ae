"""Taking in an agent's proposal: validation, supersession, policy evaluation and routing."""

from datetime import datetime, timedelta

import rfc8785
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from approvals import policy
from approvals.canonical import action_digest
from approvals.history import target_key
from approvals.models import (
    Agent,
    Decision,
    Proposal,
    ReviewNotice,
)
from approvals.schemas import ProposalSubmission
from approvals.services.common import SYSTEM, _audit_time, agent_actor, proposal_subject, record
from approvals.services.decisions import _issue_decision
from approvals.services.errors import IntakeError, ServiceError
from approvals.services.halts import _refuse_if_halted
from approvals.services.lifecycle import _expiry_for, transition
from approvals.states import ALLOWED, State
from audit.models import Verb


def submit_proposal(agent: Agent, submission: ProposalSubmission, *, via: str) -> tuple[Proposal, bool]:
    """Create the proposal for an agent's approval request (idempotent on agent, task, request id) and
    evaluate policy. Returns (proposal, created)."""
    request = submission.request
    # The digest is checked before the replay lookup: a replay must carry the action it names, or a
    # changed action under a known request_id would pass as the same request.
    try:
        recomputed = action_digest(request.action)
    except rfc8785.CanonicalizationError as error:
        raise IntakeError(
            "bad_action", f"action cannot be canonicalized: {error}", "request.action"
        ) from error
    if recomputed != request.action_digest:
        raise IntakeError(
            "digest_mismatch",
            f"action_digest does not match the action: Reviewer computed {recomputed} (RFC 8785 + SHA-256)",
            "request.action_digest",
        )
    existing = Proposal.objects.filter(
        agent=agent, task_id=submission.task_id, request_id=request.request_id
    ).first()
    if existing:
        return _same_request_or_error(existing, request), False

    canonical = rfc8785.dumps(request.action).decode()
    material = len(canonical) + len(rfc8785.dumps(request.consequences))
    if material > settings.PROPOSAL_MAX_BYTES:
        raise IntakeError(
            "too_large",
            f"action and consequences take {material} bytes; the limit is {settings.PROPOSAL_MAX_BYTES}",
            "request.action",
        )
    created_at = timezone.now()
    if request.expires_at and request.expires_at <= created_at:
        raise IntakeError("already_expired", "expires_at is in the past", "request.expires_at")

    try:
        with transaction.atomic():
            if request.supersedes:
                # Lock the request this one replaces before the audit chain head, the order a vote on it
                # takes them in; the other order deadlocks against that vote on PostgreSQL.
                list(
                    Proposal.objects.select_for_update()
                    .filter(agent=agent, task_id=submission.task_id, request_id=request.supersedes)
                    .values_list("pk")
                )
            _refuse_if_halted(agent.tenant_id, agent.id)
            proposal = Proposal.objects.create(
                tenant=agent.tenant,  # the agent's, already read: policy evaluation needs it again
                agent=agent,
                task_id=submission.task_id,
                context_id=submission.context_id,
                request_id=request.request_id,
                summary=request.summary,
                action=request.action,
                action_canonical=canonical,
                action_digest=recomputed,
                tool=request.action["tool"],
                target_key=target_key(request.action),
                principal_id=request.principal.id,
                principal_display=request.principal.display,
                agent_version=request.agent_version,
                consequences=request.consequences,
                diff=[d.model_dump() for d in request.diff],
                evidence=[e.model_dump() for e in request.evidence],
                expires_at=request.expires_at
                or created_at + timedelta(seconds=agent.tenant.default_ttl_seconds),
            )
            record(
                agent.tenant_id,
                actor=agent_actor(agent),
                verb=Verb.PROPOSAL_SUBMITTED,
                subject=proposal_subject(proposal),
                data={
                    "via": via,
                    "task_id": proposal.task_id,
                    "context_id": proposal.context_id,
                    "request_id": proposal.request_id,
                    "tool": proposal.tool,
                    "action_digest": proposal.action_digest,
                    "principal": proposal.principal_id,
                    "agent_version": proposal.agent_version,
                    "supersedes": request.supersedes,
                },
            )
            if request.supersedes:
                _supersede(agent, submission.task_id, request.supersedes, proposal, actor=agent_actor(agent))
            _evaluate_and_route(proposal, requested_expiry=request.expires_at, actor=agent_actor(agent))
    except IntegrityError:
        # The same request arrived twice at once (push and REST): the other one created it.
        existing = Proposal.objects.filter(
            agent=agent, task_id=submission.task_id, request_id=request.request_id
        ).first()
        if existing is None:
            raise
        return _same_request_or_error(existing, request), False
    return proposal, True


def record_intake_refusal(
    agent: Agent, error: ServiceError, *, via: str, task_id: str = "", request_id: str = ""
) -> None:
    """Leave a trace of an authenticated agent's request that intake refused (a digest that does not
    match its action, a reused request id, a halt): the attempt itself is evidence."""
    with transaction.atomic():
        record(
            agent.tenant_id,
            actor=agent_actor(agent),
            verb=Verb.INTAKE_REFUSED,
            subject=f"agent:{agent.slug}",
            data={
                "via": via,
                "code": error.code,
                "field": error.field,
                "task_id": task_id[:200],
                "request_id": request_id[:200],
            },
        )


def _same_request_or_error(existing: Proposal, request) -> Proposal:
    if existing.action_digest != request.action_digest:
        raise IntakeError(
            "request_id_reused",
            "this request_id is already known with another action; a changed action needs a new request_id",
            "request.request_id",
        )
    return existing


def _supersede(agent: Agent, task_id: str, old_request_id: str, new: Proposal, *, actor: str):
    old = (
        Proposal.objects.select_for_update()
        .filter(agent=agent, task_id=task_id, request_id=old_request_id)
        .first()
    )
    if old is None:
        raise IntakeError(
            "unknown_supersedes",
            f"supersedes names {old_request_id!r}, which this task never asked for",
            "request.supersedes",
        )
    if State.SUPERSEDED not in ALLOWED[old.state]:
        raise IntakeError(
            "cannot_supersede", f"the request it supersedes is {old.state}", "request.supersedes"
        )
    transition(
        old,
        State.SUPERSEDED,
        actor=actor,
        reason=f"superseded by proposal {new.id}",
        data={"successor": str(new.id)},
    )
    Proposal.objects.filter(pk=new.pk).update(supersedes=old)
    new.supersedes = old


def _evaluate_and_route(proposal: Proposal, *, requested_expiry: datetime | None, actor: str):
    # The same context a policy dry run replays, so a dry run shows what intake would have done.
    context = policy.context_for_proposal(proposal)
    evaluation = policy.evaluate(proposal.tenant, policy.active_versions_for(proposal.tenant), context)
    proposal.requirements = evaluation.requirements
    proposal.risk = evaluation.risk
    proposal.reversibility = context["reversibility"]
    proposal.expires_at = _expiry_for(requested_expiry, evaluation.ttl_seconds, proposal.created_at)
    proposal.save(update_fields=["requirements", "risk", "reversibility", "expires_at"])
    # A new proposal pins no version yet: one INSERT, not set()'s read-then-write.
    Proposal.policy_versions.through.objects.bulk_create(
        Proposal.policy_versions.through(proposal_id=proposal.pk, policyversion_id=version.pk)
        for version in evaluation.versions
    )
    record(
        proposal.tenant_id,
        actor=SYSTEM,
        verb=Verb.POLICY_EVALUATED,
        subject=proposal_subject(proposal),
        data={
            "outcome": evaluation.outcome,
            "policies": [v.ref for v in evaluation.versions],
            "requirements": evaluation.requirements,
            "reason": evaluation.reason,
            "errors": evaluation.errors,
            "expires_at": _audit_time(proposal.expires_at),
        },
    )

    if evaluation.outcome == "deny":
        transition(proposal, State.DENIED, actor=SYSTEM, reason=evaluation.reason)
        _issue_decision(
            proposal,
            Decision.Kind.REJECTED,
            reason=evaluation.reason,
            approvers=_policy_approvers(evaluation),
        )
    elif evaluation.outcome == "allow":
        transition(proposal, State.ALLOWED, actor=SYSTEM, reason=evaluation.reason)
        _issue_decision(
            proposal,
            Decision.Kind.APPROVED,
            reason=evaluation.reason,
            approvers=_policy_approvers(evaluation),
        )
    else:
        transition(proposal, State.AWAITING_REVIEW, actor=SYSTEM, reason=evaluation.reason)
        # The reviewers hear of it from the worker, in a digest (approvals/notifications.py): one row
        # here, committed with the proposal, and no mail inside the request.
        ReviewNotice.objects.create(proposal=proposal)


def _policy_approvers(evaluation) -> list[dict]:
    return [
        {
            "sub": f"policy:{v.policy.slug}@{v.version}",
            "name": v.policy.name,
            "group": None,
            "auth": {"method": "policy"},
        }
        for v in evaluation.versions
    ]
