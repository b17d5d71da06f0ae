"""Taking in an agent's proposal: validation, supersession, policy evaluation and routing."""

from datetime import datetime
from functools import lru_cache

import rfc8785
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from approvals.canonical import action_digest
from approvals.models import Agent, Decision, Halt, PolicyVersion, Proposal, ReviewNotice
from approvals.models.risk import rank
from approvals.policy.evaluation import (
    Evaluation,
    active_versions_for,
    classified_target_key,
    context_for_proposal,
    evaluate,
)
from approvals.policy.history import policy_counts, target_key
from approvals.schemas import ProposalSubmission
from approvals.services.common import agent_actor, proposal_subject
from approvals.services.decisions import issue_decision
from approvals.services.follow_ups import open_follow_up
from approvals.services.halts import refuse_halted
from approvals.services.intake_read import Found, hold_and_read
from approvals.services.lifecycle import expiry_for, first_transition, record_transition, transition
from approvals.services.quotas import (
    OpenCounts,
    spend_or_refuse,
)
from approvals.sql import insert_sql, insert_statement
from approvals.states import ALLOWED, State
from audit.labels import SYSTEM, agent_label
from audit.models import Verb
from audit.trail import audit_time, record, recorded_together
from lib.errors import IntakeError, ServiceError
from lib.held_writes import held_writes, write


def submit_proposal(
    agent: Agent, submission: ProposalSubmission, *, via: str, decision_in_answer: bool = False
) -> tuple[Proposal, bool]:
    """Create the proposal for an agent's approval request (idempotent on agent, task, request id) and
    evaluate policy. Returns (proposal, created). `decision_in_answer`: the agent acts on a decision
    policy makes here from the answer, so its continuation is held (ANSWERED_CONTINUATION_DELAY_SECONDS)
    instead of sent right after the commit."""
    request = submission.request
    if request.agent and request.agent != agent.slug:
        raise IntakeError(
            "wrong_agent",
            f"the request names agent {request.agent!r}, but it came from agent {agent.slug!r}",
            "request.agent",
        )
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
    # Refusals that a replay does not meet: a replay returns what was stored, so they are raised only
    # once the read below has found no earlier request.
    canonical = rfc8785.dumps(request.action).decode()
    material = len(canonical) + len(rfc8785.dumps(request.consequences))
    created_at = timezone.now()
    refusal = None
    if material > settings.PROPOSAL_MAX_BYTES:
        refusal = IntakeError(
            "too_large",
            f"action and consequences take {material} bytes; the limit is {settings.PROPOSAL_MAX_BYTES}",
            "request.action",
        )
    elif request.expires_at and request.expires_at <= created_at:
        refusal = IntakeError("already_expired", "expires_at is in the past", "request.expires_at")

    refused = None
    try:
        # The proposal's audit events (submitted, evaluated, its transition, the decision) in one INSERT,
        # and every write after the reads in one round trip with the COMMIT (lib/held_writes.py): the
        # quota rows' lock, which every intake of the tenant waits for, is held one round trip less.
        with transaction.atomic(), held_writes(commit=True), recorded_together():
            proposal = Proposal(
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
            )
            # First, before any read intake decides on: the quota rows' lock, so that the counts read
            # with it see every proposal the intakes before this one committed (services/quotas.py).
            hold, found = hold_and_read(agent, proposal, created_at)
            old = None
            if request.supersedes:
                # Lock the request this one replaces (after the quota rows, as before any change of it).
                old = (
                    Proposal.objects.select_for_update()
                    .filter(agent=agent, task_id=submission.task_id, request_id=request.supersedes)
                    .first()
                )
            if found.existing_id is not None:
                return _same_request_or_error(Proposal.objects.get(pk=found.existing_id), request), False
            if refusal:
                raise refusal
            if found.halt_id is not None:
                refuse_halted(Halt.objects.get(pk=found.halt_id))
            if request.supersedes:
                _check_supersedable(old, request.supersedes)
                proposal.supersedes = old
            evaluation = _evaluate(
                proposal, found, requested_expiry=request.expires_at, created_at=created_at
            )
            refused = spend_or_refuse(
                hold,
                found.open_counts,
                waiting=_target_state(evaluation) == State.AWAITING_REVIEW,
                now=created_at,
                via=via,
            )
            if refused is None:
                _store_and_route(
                    proposal,
                    evaluation,
                    old,
                    via=via,
                    supersedes=request.supersedes,
                    decision_in_answer=decision_in_answer,
                )
    except IntegrityError:
        # The same request arrived twice at once (push and REST): the other one created it.
        existing = Proposal.objects.filter(
            agent=agent, task_id=submission.task_id, request_id=request.request_id
        ).first()
        if existing is None:
            raise
        return _same_request_or_error(existing, request), False
    if refused is not None:
        # Raised after the commit: the refusal's count and audit event stay, and nothing else was written.
        raise refused
    return proposal, True


def _evaluate(proposal: Proposal, found: Found, *, requested_expiry, created_at) -> Evaluation:
    """Policy decides before the proposal is stored, so its row is written once, complete."""
    # The same context a policy dry run replays, so a dry run shows what intake would have done.
    context = context_for_proposal(proposal, history=found.history, versions=found.versions)
    evaluation = evaluate(proposal.tenant, found.versions, context)
    proposal.requirements = evaluation.requirements
    proposal.risk = evaluation.risk
    proposal.reversibility = context["reversibility"]
    proposal.expires_at = expiry_for(requested_expiry, evaluation.ttl_seconds, created_at)
    return evaluation


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
            subject=agent_label(agent.slug),
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


def _check_supersedable(old: Proposal | None, old_request_id: str) -> None:
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


def _store_and_route(
    proposal: Proposal,
    evaluation: Evaluation,
    old: Proposal | None,
    *,
    via: str,
    supersedes,
    decision_in_answer: bool,
) -> None:
    """Store the evaluated proposal in its first state (one INSERT) and write what goes with it: the
    audit events (submitted, the superseded request's transition, policy evaluated, the proposal's
    transition), the pinned versions, and the review notice or the decision."""
    target = _target_state(evaluation)
    previous = first_transition(proposal, target)
    _insert_with_pins(proposal, evaluation.versions)
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
    _pin_and_route(proposal, evaluation, target, first=previous, decision_in_answer=decision_in_answer)


def _insert_with_pins(proposal: Proposal, versions: list[PolicyVersion]) -> None:
    """Insert the evaluated proposal and its pinned versions: on PostgreSQL one statement (the proposal's
    INSERT in a WITH, the pins' INSERT reading its id), elsewhere the two INSERTs one after the other.
    Plain SQL built once per process and number of pins; the values are prepared by the fields as the
    ORM's INSERT prepares them (created_at set now, the JSON adapted), and risk_rank kept with the risk
    as Proposal.save keeps it. Nothing listens for Proposal's save signals."""
    proposal.risk_rank = rank(proposal.risk)
    insert, values = insert_statement(proposal)
    pins = [version.pk for version in versions]
    if connection.vendor == "postgresql" and pins:
        write(_proposal_with_pins_sql(connection.vendor, len(pins)), (*values, *pins))
    else:
        write(insert, values)
        if pins:
            write(_pins_insert_sql(connection.vendor, len(pins)), _pin_rows(proposal, pins))


def _pin_rows(proposal: Proposal, pins: list) -> list:
    proposal_id = Proposal._meta.pk.get_db_prep_value(proposal.pk, connection)
    return [value for pin in pins for value in (proposal_id, pin)]


def _pin_names() -> tuple[str, str, str]:
    through = Proposal.policy_versions.through
    quote = connection.ops.quote_name
    return (
        quote(through._meta.db_table),
        quote(through._meta.get_field("proposal").column),
        quote(through._meta.get_field("policyversion").column),
    )


@lru_cache
def _pins_insert_sql(vendor: str, count: int) -> str:
    table, proposal_column, version_column = _pin_names()
    rows = ", ".join(["(%s, %s)"] * count)
    return f"INSERT INTO {table} ({proposal_column}, {version_column}) VALUES {rows}"  # noqa: S608


@lru_cache
def _proposal_with_pins_sql(vendor: str, count: int) -> str:
    table, proposal_column, version_column = _pin_names()
    pk = connection.ops.quote_name(Proposal._meta.pk.column)
    pins = ", ".join(["(%s::bigint)"] * count)
    return (
        f'WITH "new_proposal" AS ({insert_sql(Proposal, vendor)} RETURNING {pk})'  # noqa: S608
        f" INSERT INTO {table} ({proposal_column}, {version_column})"
        f' SELECT "new_proposal".{pk}, "pin"."id" FROM "new_proposal"'
        f' CROSS JOIN (VALUES {pins}) AS "pin"("id")'
    )


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
    evaluation = _evaluate(proposal, found, requested_expiry=requested_expiry, created_at=proposal.created_at)
    proposal.save(update_fields=["target_key", "requirements", "risk", "reversibility", "expires_at"])
    _pin_and_route(proposal, evaluation, _target_state(evaluation), first=None)


def _target_state(evaluation: Evaluation) -> str:
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
        write(*insert_statement(ReviewNotice(proposal=proposal)))
        # The worker chases it from here: whether enough people can decide it (told to the admins at
        # once if not), reminders, escalation (approvals/notify/chase.py). One INSERT here.
        open_follow_up(proposal)
    else:
        issue_decision(
            proposal,
            Decision.Kind.REJECTED if target == State.DENIED else Decision.Kind.APPROVED,
            reason=evaluation.reason,
            approvers=_policy_approvers(evaluation),
            versions=evaluation.versions,
            continuation_delay=settings.ANSWERED_CONTINUATION_DELAY_SECONDS if decision_in_answer else 0,
        )


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
