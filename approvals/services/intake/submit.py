"""Taking in an agent's proposal: validation, replay, supersession, the quota rows' lock and the one read
(read.py), the quotas (approvals/services/quotas.py), policy and routing (routing.py)."""

from dataclasses import dataclass
from datetime import datetime, timedelta

import rfc8785
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from approvals.canonical import action_digest
from approvals.models import Agent, Halt, Proposal
from approvals.policy.history import target_key
from approvals.schemas import ProposalSubmission
from approvals.services.common import agent_actor
from approvals.services.grants import grant_terms_or_error, plan_grant
from approvals.services.halts import refuse_halted
from approvals.services.intake.read import hold_and_read
from approvals.services.intake.routing import evaluate_proposal, store_and_route, target_state
from approvals.services.quotas import (
    CountCaps,
    Hold,
    OpenCounts,
    hold_quotas,
    open_counts_subqueries,
    spend_or_refuse,
)
from approvals.states import ALLOWED, State
from audit.labels import agent_label
from audit.models import Verb
from audit.trail import audit_time, record, recorded_together
from lib import tracing
from lib.errors import IntakeError, ServiceError
from lib.storage.held_writes import held_writes


def submit_proposal(
    agent: Agent,
    submission: ProposalSubmission,
    *,
    via: str,
    decision_in_answer: bool = False,
    consume: bool = False,
    token_claims: dict | None = None,
) -> tuple[Proposal, bool]:
    """Create the proposal for an agent's approval request (idempotent on agent, task, request id) and
    evaluate policy. Returns (proposal, created). `decision_in_answer`: the agent acts on a decision
    policy makes here from the answer, so its continuation is held (ANSWERED_CONTINUATION_DELAY_SECONDS)
    instead of sent right after the commit. `consume`: an approval policy makes here is consumed for
    the agent in the same transaction (the proposal is `executing` when this returns; a replay never
    consumes: it answers what is stored). `token_claims`: what a standard door (oauth/) adds to the
    decision token (Proposal.token_claims)."""
    request = submission.request
    try:
        with transaction.atomic(durable=True):
            taken = take_in(
                agent,
                submission,
                via=via,
                decision_in_answer=decision_in_answer,
                consume=consume,
                token_claims=token_claims,
            )
    except IntegrityError:
        # The same request arrived twice at once (push and REST): the other one created it.
        existing = Proposal.objects.filter(
            agent=agent, task_id=submission.task_id, request_id=request.request_id
        ).first()
        if existing is None:
            raise
        return _same_request_or_error(existing, request), False
    if taken.refused is not None:
        # Raised after the commit: the refusal's count and audit event stay, and nothing else was written.
        raise taken.refused
    return taken.proposal, taken.created


@dataclass
class Taken:
    """What take_in did: the proposal (new, or the one already known), and the quota refusal to raise
    after the commit (its count and audit event are written; the proposal is not)."""

    proposal: Proposal
    created: bool
    refused: ServiceError | None = None


def take_in(
    agent: Agent,
    submission: ProposalSubmission,
    *,
    via: str,
    decision_in_answer: bool = False,
    consume: bool = False,
    manifest: str = "",
    token_claims: dict | None = None,
) -> Taken:
    """submit_proposal's work inside the caller's transaction: a batch takes its members in, all or
    nothing, in one (approvals/services/batches.py). `manifest`: a batch member's manifest digest."""
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
    # A standing grant's terms (approvals/policy/grants.py), checked before anything is written.
    grant_terms = None
    if refusal is None:
        try:
            grant_terms = grant_terms_or_error(request.action, request.principal.id, created_at)
        except IntakeError as error:
            refusal = error

    refused = None
    # The proposal's audit events (submitted, evaluated, its transition, the decision) in one INSERT,
    # and the writes after the reads held for one round trip (lib/storage/held_writes.py): the quota rows'
    # lock, which every intake of the tenant waits for, is held for fewer round trips.
    with held_writes(), recorded_together():
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
            manifest_digest=manifest,
            trace_parent=tracing.current_traceparent(),  # intake's span: later spans continue it
            token_claims=token_claims or {},
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
            existing = Proposal.objects.get(pk=found.existing_id)
            return Taken(_same_request_or_error(existing, request), created=False)
        if refusal:
            raise refusal
        if found.halt_id is not None:
            refuse_halted(Halt.objects.get(pk=found.halt_id))
        if request.supersedes:
            _check_supersedable(old, request.supersedes)
            proposal.supersedes = old
        with tracing.span("reviewer.policy") as span:
            evaluation = evaluate_proposal(
                proposal, found, requested_expiry=request.expires_at, created_at=created_at
            )
            span.set_attributes(
                {
                    "reviewer.policy.outcome": evaluation.outcome,
                    "reviewer.policy.versions": [
                        f"{version.policy.slug}@{version.version}" for version in evaluation.versions
                    ],
                }
            )
        # A call policy sends to people may fit a standing grant instead (services/grants.py).
        grant = plan_grant(
            proposal,
            evaluation,
            found.versions,
            found.history,
            created_at,
            grant_terms,
            grants_named=found.grants_named,
        )
        refused = spend_or_refuse(
            hold,
            found.open_counts,
            waiting=target_state(evaluation) == State.AWAITING_REVIEW,
            now=created_at,
            via=via,
        )
        if refused is None:
            with tracing.span("reviewer.route") as span:
                proposal = store_and_route(
                    proposal,
                    evaluation,
                    old,
                    via=via,
                    supersedes=request.supersedes,
                    decision_in_answer=decision_in_answer,
                    grant=grant,
                    consume=consume,
                )
                span.set_attributes(
                    {"reviewer.proposal.id": str(proposal.id), "reviewer.proposal.state": proposal.state}
                )
    return Taken(proposal, created=refused is None, refused=refused)


def record_intake_refusal(
    agent: Agent, error: ServiceError, *, via: str, task_id: str = "", request_id: str = ""
) -> None:
    """Leave a trace of an authenticated agent's request that intake refused (a digest that does not
    match its action, a reused request id, a halt): the attempt itself is evidence.

    A refused request is intake all the same: it spends a token of the agent's and the tenant's buckets
    (services/quotas.py) as a proposal would. Past the rate it raises QuotaExceeded (429, Retry-After)
    after its commit, and the quotas count it in the agent's throttle window, one `intake.throttled`
    event a window. Within the rate it is counted the same way in the agent's window of invalid intake
    (QUOTA_AUDIT_WINDOW_SECONDS): the window's first refusal writes the `intake.refused` event, with what
    it was and how many the window before refused; the others only count. So an agent that sends
    nothing but invalid requests writes one event a window, not one a request, and the trail keeps
    the first of each window and the count of the rest."""
    now = timezone.now()
    with transaction.atomic(durable=True):
        hold = hold_quotas(agent, now)
        throttled = spend_or_refuse(hold, _known_counts(agent, hold), waiting=False, now=now, via=via)
        if throttled is None:
            _note_invalid(hold, error, now=now, via=via, task_id=task_id, request_id=request_id)
    if throttled is not None:
        raise throttled from error


def _note_invalid(
    hold: Hold, error: ServiceError, *, now: datetime, via: str, task_id: str, request_id: str
) -> None:
    """Count the refusal in the agent's window of invalid intake; the window's first writes the event."""
    state, agent = hold.agent_state, hold.agent
    window = timedelta(seconds=settings.QUOTA_AUDIT_WINDOW_SECONDS)
    if state.invalid_at is None or now - state.invalid_at >= window:
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
                "window_seconds": settings.QUOTA_AUDIT_WINDOW_SECONDS,
                # The refusals of the window before, which had no event of their own after its first.
                "previous_window": None
                if state.invalid_at is None
                else {"at": audit_time(state.invalid_at), "refused": state.invalid_refused},
            },
        )
        state.invalid_at, state.invalid_refused = now, 1
    else:
        state.invalid_refused += 1
    state.save(update_fields=["invalid_at", "invalid_refused"])


def _known_counts(agent: Agent, hold: Hold) -> OpenCounts:
    """What a refused request tells the quotas of what waits: nothing where the quota rows bound it (a
    refused request never enters the queue, only the rates count it), a count where a bound is unknown
    (the rows were just created, or a count stopped at its cap), as intake counts then: the spend
    writes the bounds back, and two unknown ones are untyped NULLs that PostgreSQL will not store."""
    if hold.agent_state.open_at_most is not None and hold.tenant_state.open_at_most is not None:
        return OpenCounts(agent=None, tenant=None)
    caps = CountCaps.of(hold.agent_limit, hold.tenant_limit)
    agent_open, tenant_open = open_counts_subqueries(agent, caps, always=True)
    counted = Agent.objects.filter(pk=agent.pk).annotate(agent_open=agent_open, tenant_open=tenant_open)
    agent_count, tenant_count = counted.values_list("agent_open", "tenant_open").get()
    return OpenCounts(agent=agent_count, tenant=tenant_count, caps=caps)


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
