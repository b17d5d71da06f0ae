"""Routing an evaluated proposal: policy decides before intake stores it, so its row is written once,
in its first state, with the audit events, the pinned versions, and the review notice or the decision
that go with it. A reviewer's edit routes its new proposal the same way (`evaluate_and_route`)."""

from datetime import datetime

from django.conf import settings

from approvals.models import Decision, Proposal, ReviewNotice
from approvals.models.risk import rank
from approvals.policy.evaluation import (
    Evaluation,
    active_versions_for,
    classified_target_key,
    context_for_proposal,
    evaluate,
)
from approvals.policy.history import policy_counts
from approvals.services.common import agent_actor, proposal_subject
from approvals.services.decisions import consume_at_intake, issue_decision
from approvals.services.follow_ups import open_follow_up
from approvals.services.grants import GrantPlan
from approvals.services.intake.read import Found
from approvals.services.lifecycle import expiry_for, first_transition, record_transition, transition
from approvals.services.quotas import OpenCounts
from approvals.states import State
from approvals.storage.intake import insert_proposal
from approvals.storage.rows import insert_held
from audit.labels import SYSTEM
from audit.models import Verb
from audit.trail import audit_time, record


def evaluate_proposal(proposal: Proposal, found: Found, *, requested_expiry, created_at) -> Evaluation:
    """Policy decides before the proposal is stored, so its row is written once, complete."""
    # The same context a policy dry run replays, so a dry run shows what intake would have done.
    context = context_for_proposal(proposal, history=found.history, versions=found.versions)
    evaluation = evaluate(proposal.tenant, found.versions, context)
    proposal.requirements = evaluation.requirements
    proposal.risk = evaluation.risk
    proposal.reversibility = context["reversibility"]
    proposal.expires_at = expiry_for(requested_expiry, evaluation.ttl_seconds, created_at)
    return evaluation


def store_and_route(
    proposal: Proposal,
    evaluation: Evaluation,
    old: Proposal | None,
    *,
    via: str,
    supersedes,
    decision_in_answer: bool,
    grant: GrantPlan | None = None,
    consume: bool = False,
) -> Proposal:
    """Store the evaluated proposal in its first state (one INSERT) and write what goes with it: the
    audit events (submitted, the superseded request's transition, policy evaluated, the proposal's
    transition), the pinned versions, and the review notice or the decision. Returns the stored
    proposal."""
    target = target_state(evaluation)
    previous = first_transition(proposal, target)
    # risk_rank is kept with the risk, as Proposal.save keeps it (the insert is not a save()).
    proposal.risk_rank = rank(proposal.risk)
    proposal = insert_proposal(proposal, evaluation.versions)
    actor = agent_actor(proposal.agent)
    record(
        proposal.tenant_id,
        actor=actor,
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
            "supersedes": supersedes,
        },
    )
    if old is not None:
        transition(
            old,
            State.SUPERSEDED,
            actor=actor,
            reason=f"superseded by proposal {proposal.id}",
            data={"successor": str(proposal.id)},
        )
    if grant is not None:
        grant.carry_out(proposal)  # the grant asked for, or spent (before the decision is signed)
    _pin_and_route(
        proposal,
        evaluation,
        target,
        first=previous,
        decision_in_answer=decision_in_answer,
        grant=grant,
        consume=consume,
    )
    return proposal


def evaluate_and_route(proposal: Proposal, *, requested_expiry: datetime | None, actor: str):
    """Evaluate and route a proposal already stored in `proposed` (a reviewer's edit,
    approvals/services/votes.py: not the agents' hot path)."""
    versions = active_versions_for(proposal.tenant)
    # Keyed as intake keys it: the admins' classification may name the target or a family of tools.
    proposal.target_key = classified_target_key(proposal.action, proposal.agent.slug, versions)
    found = Found(
        existing_id=None,
        halt_id=None,
        history=policy_counts(proposal),
        versions=versions,
        open_counts=OpenCounts(agent=0, tenant=0),  # a reviewer's edit is not intake: no quota asks
    )
    evaluation = evaluate_proposal(
        proposal, found, requested_expiry=requested_expiry, created_at=proposal.created_at
    )
    proposal.save(update_fields=["target_key", "requirements", "risk", "reversibility", "expires_at"])
    _pin_and_route(proposal, evaluation, target_state(evaluation), first=None)


def target_state(evaluation: Evaluation) -> str:
    if evaluation.outcome == "deny":
        return State.DENIED
    if evaluation.outcome == "allow":
        return State.ALLOWED
    return State.AWAITING_REVIEW


def _pin_and_route(
    proposal: Proposal,
    evaluation: Evaluation,
    target: str,
    *,
    first: str | None,
    decision_in_answer: bool = False,
    grant: GrantPlan | None = None,
    consume: bool = False,
) -> None:
    """Pin the versions that decided (a stored proposal: intake's new one was inserted with its pins),
    record the evaluation, move the proposal to `target` (`first`: the state it left already, before
    its insert; None: a stored proposal, moved here) and write the review notice or the decision."""
    if first is None:
        # A proposal edited by a reviewer pins no version yet: one INSERT, not set()'s read-then-write.
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
            "expires_at": audit_time(proposal.expires_at),
        },
    )
    if first is None:
        transition(proposal, target, actor=SYSTEM, reason=evaluation.reason)
    else:
        record_transition(proposal, first, actor=SYSTEM, reason=evaluation.reason)
    if target == State.AWAITING_REVIEW:
        # The reviewers hear of it from the worker, in a digest (approvals/worker/notifications.py): one row
        # here, committed with the proposal, and no mail inside the request.
        insert_held(ReviewNotice(proposal=proposal))  # with intake's other writes (approvals/storage/rows.py)
        # The worker chases it from here: whether enough people can decide it (told to the admins at
        # once if not), reminders, escalation (approvals/notify/chase.py). One INSERT here.
        open_follow_up(proposal)
    else:
        under_grant = grant is not None and grant.use is not None
        decision = issue_decision(
            proposal,
            Decision.Kind.REJECTED if target == State.DENIED else Decision.Kind.APPROVED,
            reason=evaluation.reason,
            approvers=grant.approvers()
            if grant is not None and under_grant
            else _policy_approvers(evaluation),
            versions=evaluation.versions,
            continuation_delay=settings.ANSWERED_CONTINUATION_DELAY_SECONDS if decision_in_answer else 0,
            grant=grant.claim if grant is not None else None,
            consume_now=consume and target == State.ALLOWED,
        )
        if decision.consumed_at is not None:
            consume_at_intake(proposal, decision)


def _policy_approvers(evaluation) -> list[dict]:
    return [
        {
            "sub": f"policy:{v.policy.slug}@{v.version}",
            "name": v.policy.name,
            "group": None,
            "auth": {"method": "policy"},
            # The keys every approver has; a policy's reason is the decision's own `reason`.
            "reason": "",
            "reservation": "",
        }
        for v in evaluation.versions
    ]
