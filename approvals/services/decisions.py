"""Signed decisions: issue, revoke, consume, and the outcome the agent reports."""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from approvals import events
from approvals.models import Agent, Decision, OutboxMessage, Proposal, Vote
from approvals.policy.evaluation import shaping_refs
from approvals.policy.grants import is_grant_request
from approvals.policy.headline import action_headline
from approvals.selectors import lock_proposal_for, tenant_role
from approvals.services.common import agent_actor, proposal_subject
from approvals.services.grants import grant_decided
from approvals.services.halts import active_halt
from approvals.services.lifecycle import (
    closed_reason,
    consume_deadline,
    enqueue_message,
    expire_proposal,
    format_moment,
    held_transition,
    revoke_proposal,
    supersession_chain,
    transition,
)
from approvals.services.quorum import Quorum
from approvals.signing import decision_claims, profile_claims, sign_decision
from approvals.states import RELEASED, STARTED, State
from approvals.storage import decisions as storage
from approvals.storage.rows import insert_held, on_postgresql
from audit.chain.accept import accept_sql
from audit.labels import SYSTEM, actor_label, tenant_chain
from audit.models import Verb
from audit.trail import audit_time, record, recorded_together
from lib import tracing
from lib.errors import CompensationRefused, Conflict, ConsumeRefused, NotFound, RevokeRefused, ServiceError
from tenants.models import TenantMembership
from tenants.queries import DECIDING_ROLES


def unnamed(approver: dict) -> dict:
    """An approver entry as the trail keeps it: the token names people (`name`), the trail only by
    pseudonym (`sub`), so erasing a person leaves every hash intact (docs/compliance.md)."""
    entry = {key: value for key, value in approver.items() if key != "name"}
    if isinstance(entry.get("on_behalf_of"), dict):
        entry["on_behalf_of"] = {"sub": entry["on_behalf_of"].get("sub")}
    return entry


def issue_decision(
    proposal: Proposal,
    kind: str,
    *,
    reason: str,
    approvers: list[dict],
    quorum: Quorum | None = None,
    versions: list | None = None,
    continuation_delay: int = 0,
    grant: dict | None = None,
    consume_now: bool = False,
) -> Decision:
    """Sign the decision, store it, and queue its delivery to the agent, all in this transaction.
    The policy claims name every version pinned on the proposal (policy.shaping_refs); `versions`:
    those versions with their policies, when the caller has them (intake pinned them just now).
    `continuation_delay`: seconds the continuation waits (the agent takes the decision from the intake
    answer; the worker sends it only if the agent has not started on it by then). `grant`: the `grant`
    claim of a call a standing grant decided (approvals/services/grants.py). `consume_now`: the agent
    asked intake to consume an approval for it (`consume_at_intake`): the decision is stored consumed,
    when it may be, and no continuation is queued (the agent has it and has started)."""
    with tracing.span("reviewer.decision", attributes={"reviewer.proposal.id": str(proposal.id)}) as span:
        decision = _sign_and_queue(
            proposal,
            kind,
            reason=reason,
            approvers=approvers,
            quorum=quorum,
            versions=versions,
            continuation_delay=continuation_delay,
            grant=grant,
            consume_now=consume_now,
        )
        span.set_attributes({"reviewer.decision.jti": str(decision.jti), "reviewer.decision.kind": kind})
        return decision


def _sign_and_queue(
    proposal: Proposal,
    kind: str,
    *,
    reason: str,
    approvers: list[dict],
    quorum: Quorum | None,
    versions: list | None,
    continuation_delay: int,
    grant: dict | None,
    consume_now: bool,
) -> Decision:
    issued = timezone.now()
    # A token a standard door hands out (TAC, CIBA) is carried by the agent to the resource: it is always
    # consumed online there, whatever the policy's consume_online says.
    consume = kind == Decision.Kind.APPROVED and (
        bool(proposal.requirements.get("consume", True)) or bool(proposal.token_claims)
    )
    decision = Decision(
        proposal=proposal,
        kind=kind,
        reason=reason[:2000],
        rev=proposal.rev,
        consume_required=consume,
        issued_at=issued,
        expires_at=_decision_deadline(proposal, kind, issued),
    )
    # The consume's own deadline rule: a decision already past it stays unconsumed.
    if consume_now and kind == Decision.Kind.APPROVED and issued < consume_deadline(proposal, decision):
        decision.consumed_at = issued
    if versions is None:
        versions = list(proposal.policy_versions.select_related("policy"))
    policy_ref, policy_refs = shaping_refs(versions, proposal.requirements)
    quorum_claim = {
        "required": proposal.requirements.get("thresholds", []),
        "approved_by": [a["sub"] for a in approvers if not a["sub"].startswith("policy:")] if quorum else [],
    }
    claims = decision_claims(
        proposal=proposal,
        decision=decision,
        issued_at=issued,
        expires_at=decision.expires_at,
        approvers=approvers,
        quorum=quorum_claim,
        policy=policy_ref,
    )
    # An edited proposal answers a request the agent made earlier on this task: name the chain and the
    # exact action, so the agent can check the edit and execute only what was approved.
    claims["action"] = proposal.action
    claims["replaces"] = supersession_chain(proposal)
    claims["policies"] = policy_refs
    if proposal.manifest_digest:
        # A batch member: the manifest it was decided under (docs/agents/batches.md).
        claims["manifest"] = proposal.manifest_digest
    if grant is not None:
        claims["grant"] = grant
    claims.update(profile_claims(proposal.token_claims))
    decision.token, decision.kid = sign_decision(claims)
    insert_held(decision)  # with intake's other writes (approvals/storage/rows.py)
    record(
        proposal.tenant_id,
        actor=SYSTEM,
        verb=Verb.DECISION_SIGNED,
        subject=proposal_subject(proposal),
        data={
            "jti": str(decision.jti),
            "kid": decision.kid,
            "decision": kind,
            "reason": decision.reason,
            "action_digest": proposal.action_digest,
            "rev": decision.rev,
            "consume": consume,
            "approvers": [unnamed(approver) for approver in approvers],
            "policy": policy_ref,
            "policies": policy_refs,
            "expires_at": audit_time(decision.expires_at),
            "task_id": proposal.task_id,
            "request_id": proposal.request_id,
            # What was decided, in words, for reports that list decisions (audit never reads proposals).
            "tool": proposal.tool,
            "summary": proposal.summary[:200],
            "amount": amount_words(proposal.action, proposal.consequences),
            **({"manifest": proposal.manifest_digest} if proposal.manifest_digest else {}),
            **({"grant": grant} if grant is not None else {}),
        },
    )
    if is_grant_request(proposal.tool):
        grant_decided(proposal, decision, approvers)  # the grant asked for is in force, or declined
    if decision.consumed_at is not None:
        return decision  # the agent took it from the intake answer and started: nothing to continue
    enqueue_message(
        proposal,
        OutboxMessage.Kind.CONTINUE,
        message_id=f"decision-{decision.jti}",
        payload={"jti": str(decision.jti), "decision": kind, "reason": decision.reason},
        new=True,  # the jti was made above
        delay_seconds=continuation_delay,
    )
    return decision


def _decision_deadline(proposal: Proposal, kind: str, issued: datetime) -> datetime:
    """When the token stops releasing anything: its lifetime (the policy's TTL, capped by
    DECISION_TOKEN_MAX_SECONDS), and for an approval never later than the proposal's own expiry, which
    is already the earliest of the policy's TTL and the request's `expires_at` (intake took the minimum).
    A rejection or a question releases nothing, so it keeps its lifetime for the agent to read it."""
    lifetime = min(
        int(proposal.requirements.get("ttl_seconds") or settings.DECISION_TOKEN_MAX_SECONDS),
        settings.DECISION_TOKEN_MAX_SECONDS,
    )
    deadline = issued + timedelta(seconds=lifetime)
    if kind == Decision.Kind.APPROVED:
        deadline = min(deadline, proposal.expires_at)
    return deadline


def amount_words(action: dict, consequences: dict) -> str:
    """The amount as the page's headline states it, always with its currency ("EUR 1,850.00"), and a
    currency the digest does not bind said as such: for reports that list decisions."""
    headline = action_headline(action, consequences)
    if not headline.amount:
        return ""
    return (
        f"{headline.amount}; currency {headline.currency_note}" if headline.currency_note else headline.amount
    )


def may_revoke(proposal: Proposal, user) -> bool:
    """Who may take back a released decision: a tenant admin, or a person who approved it."""
    if tenant_role(user, proposal.tenant_id) == TenantMembership.Role.ADMIN:
        return True
    return proposal.votes.filter(voter=user, verdict=Vote.Verdict.APPROVE).exists()


def revoke_decision(proposal_id, actor, *, reason: str) -> Proposal:
    """Take back a released decision before the agent consumed it; the agent's task is cancelled."""
    reason = (reason or "").strip()
    if not reason:
        raise RevokeRefused("reason_required", "a revocation needs a reason", "reason")
    with transaction.atomic(durable=True):
        proposal = lock_proposal_for(proposal_id, actor)
        if not may_revoke(proposal, actor):
            raise RevokeRefused(
                "not_eligible", "only an approver of this decision or a tenant admin can revoke it"
            )
        if proposal.state not in RELEASED:
            message = (
                "the agent has started the work: it can no longer be revoked; record a compensation note"
                if proposal.state in STARTED
                else f"there is no released decision to revoke: {closed_reason(proposal)}"
            )
            raise Conflict("not_revocable", message)
        revoke_proposal(proposal, actor=actor_label(actor), reason=reason, revoked_by=actor)
    return proposal


def note_compensation(proposal_id, actor, *, note: str) -> Proposal:
    note = (note or "").strip()
    if not note:
        raise CompensationRefused("note_required", "write the compensation note", "note")
    with transaction.atomic(durable=True):
        proposal = lock_proposal_for(proposal_id, actor, roles=DECIDING_ROLES)
        proposal.compensation_note = (proposal.compensation_note + "\n" + note).strip()[:5000]
        proposal.save(update_fields=["compensation_note"])
        record(
            proposal.tenant_id,
            actor=actor_label(actor),
            verb=Verb.COMPENSATION_NOTED,
            subject=proposal_subject(proposal),
            data={"note": note[:2000]},
        )
    return proposal


def consume_decision(agent: Agent, jti, *, rev: int, now: datetime | None = None) -> Proposal:
    """Fencing: atomically move a released decision to executing, right before the side effect.
    Exactly one caller wins; every other gets ConsumeRefused with the reason."""
    clock = now or timezone.now()
    refusal: ConsumeRefused | None = None
    with transaction.atomic(durable=True):
        claimed = _claim(agent, jti, rev, clock) if on_postgresql() else None
        if claimed is not None:
            return claimed
        # Nothing was claimed (or SQLite): the refusal's reason is read under the rows' locks.
        proposal, decision = _lock_decision(agent, jti)
        refusal = _consume_refusal(proposal, decision, rev, clock)
        if refusal is None:
            decision.consumed_at = clock
            decision.save(update_fields=["consumed_at"])
            transition(
                proposal,
                State.EXECUTING,
                actor=agent_actor(agent),
                reason="decision consumed",
                data={"jti": str(jti)},
            )
            record(
                proposal.tenant_id,
                actor=agent_actor(agent),
                verb=Verb.DECISION_CONSUMED,
                subject=proposal_subject(proposal),
                data={"jti": str(jti), "rev": rev},
            )
        else:
            if refusal.code == "expired" and proposal.state in RELEASED:
                expire_proposal(proposal, reason="decision expired before it was consumed")
            elif refusal.code == "halted":
                # Released while a halt was committing (a vote or an intake raced it): revoke it as the
                # halt would have, so resuming never brings it back.
                halt_record = active_halt(proposal.tenant_id, proposal.agent_id)
                why = halt_record.reason if halt_record else "lifted meanwhile"
                revoke_proposal(proposal, actor=SYSTEM, reason=f"halt: {why}")
            record(
                proposal.tenant_id,
                actor=agent_actor(agent),
                verb=Verb.DECISION_CONSUME_REFUSED,
                subject=proposal_subject(proposal),
                data={"jti": str(jti), "code": refusal.code},
            )
    if refusal is not None:
        raise refusal
    return proposal


def consume_at_intake(proposal: Proposal, decision: Decision) -> None:
    """The consume of an approval intake just issued consumed (`issue_decision(consume_now=True)`), for
    an agent that asked for it (`Prefer: consume`, docs/agents/rest-api.md): the proposal moves
    allowed → executing in intake's transaction, with the consume's audit event. The consume's checks
    hold by construction: intake read the halt under the quota rows' lock, the decision is approved, at
    the proposal's rev, new (neither consumed nor revoked), bound to the action digest just checked,
    and issue_decision consumed it only before its deadline. The writes are held with intake's, so it
    costs no round trip."""
    actor = agent_actor(proposal.agent)
    jti = str(decision.jti)
    held_transition(
        proposal, State.EXECUTING, actor=actor, reason="decision consumed at intake", data={"jti": jti}
    )
    record(
        proposal.tenant_id,
        actor=actor,
        verb=Verb.DECISION_CONSUMED,
        subject=proposal_subject(proposal),
        data={"jti": jti, "rev": decision.rev, "via": "intake"},
    )


def _claim(agent: Agent, jti, rev: int, clock: datetime) -> Proposal | None:
    """The consume in one statement (PostgreSQL, approvals/storage/decisions.py): the proposal moves to
    executing and the decision is marked consumed only if every condition of _consume_refusal holds,
    with both audit events in the same round trip; None when nothing matched. The halt is read in the
    statement, without a cache."""
    actor = agent_actor(agent)
    audit, audit_params = accept_sql(
        tenant_chain(agent.tenant_id),
        [
            {  # transition(): the state it left and its new rev come from the claimed row
                "actor": actor,
                "verb": Verb.PROPOSAL_TRANSITIONED,
                "data": {"to": State.EXECUTING, "reason": "decision consumed", "jti": str(jti)},
                "data_sql": storage.CLAIMED_TRANSITION_SQL,
            },
            {"actor": actor, "verb": Verb.DECISION_CONSUMED, "data": {"jti": str(jti), "rev": rev}},
        ],
        source=storage.CLAIMED,
        subject_sql=storage.CLAIMED_SUBJECT_SQL,
    )
    proposal = storage.claim(agent, jti, rev, clock, audit=audit, audit_params=audit_params)
    if proposal is None:
        return None
    events.proposal_changed(proposal)  # as transition() announces it
    return proposal


def _lock_decision(agent: Agent, jti) -> tuple[Proposal, Decision]:
    """Lock a decision of this agent for a write, and read it with its proposal (and the proposal's
    agent and tenant), in one statement. It locks the proposal row first, then the decision (FOR UPDATE
    OF in that order: PostgreSQL locks a joined row's tables in the order they are named), the order
    revoke, halt and expiry take them in (the other order deadlocks against them). Only those two rows
    are locked, not the agent and tenant rows read with them."""
    locked = (
        Proposal.objects.select_for_update(of=("self", "decision"))
        .select_related("decision", "agent", "tenant")
        .filter(decision__jti=jti, agent=agent)
        .first()
    )
    if locked is None:
        raise NotFound("not_found", "no decision with this id for this agent")
    return locked, locked.decision


def _consume_refusal(
    proposal: Proposal, decision: Decision, rev: int, clock: datetime
) -> ConsumeRefused | None:
    if proposal.state == State.SUPERSEDED:
        # Checked first: the decision of a superseded proposal is a needs_info; the answer is the successor.
        return ConsumeRefused("superseded", f"nothing may execute: {closed_reason(proposal, clock)}")
    if decision.kind != Decision.Kind.APPROVED:
        return ConsumeRefused("not_approved", f"this decision is {decision.kind}; nothing may execute")
    if decision.revoked_at or proposal.state == State.REVOKED:
        return ConsumeRefused("revoked", f"nothing may execute: {closed_reason(proposal, clock)}")
    if decision.consumed_at or proposal.state in STARTED:
        at = format_moment(decision.consumed_at or proposal.executing_since)
        return ConsumeRefused(
            "consumed", f"this decision was already consumed at {at}; it releases one execution"
        )
    if proposal.state == State.EXPIRED or clock >= consume_deadline(proposal, decision):
        deadline = consume_deadline(proposal, decision)
        return ConsumeRefused(
            "expired", f"this decision expired at {format_moment(deadline)}; nothing may execute"
        )
    if proposal.state not in RELEASED:
        return ConsumeRefused("not_released", f"the proposal is {proposal.state}")
    halt_record = active_halt(proposal.tenant_id, proposal.agent_id)
    if halt_record:
        return ConsumeRefused("halted", f"Reviewer is halted ({halt_record.reason})")
    if rev != decision.rev:
        return ConsumeRefused("stale_rev", f"the token was signed at rev {decision.rev}, not {rev}")
    return None


def record_outcome(
    agent: Agent, jti, *, status: str, transaction_id: str = "", detail: str = "", via: str = "api"
) -> Proposal:
    """The agent's report of what happened. Idempotent; unknown settles later to succeeded or failed."""
    targets = {"succeeded": State.SUCCEEDED, "failed": State.FAILED, "unknown": State.UNKNOWN}
    if status not in targets:
        raise ServiceError("bad_status", "status is succeeded, failed or unknown", "status")
    with transaction.atomic(durable=True):
        proposal, decision = _lock_decision(agent, jti)
        target = targets[status]
        if proposal.state == target:
            return proposal  # the same report again (push and API both arrived)
        if proposal.state in RELEASED and not decision.consume_required:
            # No online consumption was required: the outcome report is the first sign it started.
            decision.consumed_at = timezone.now()
            decision.save(update_fields=["consumed_at"])
            transition(proposal, State.EXECUTING, actor=agent_actor(agent), reason="outcome reported")
        if proposal.state not in {State.EXECUTING, State.UNKNOWN}:
            raise Conflict(
                "not_executing", f"the proposal is {proposal.state}; it has no execution to report on"
            )
        if proposal.state == State.UNKNOWN and target == State.UNKNOWN:
            return proposal
        reported = {
            "transaction_id": (transaction_id or proposal.transaction_id)[:200],
            "outcome_detail": (detail or "")[:1000],
        }
        # The report's fields in the transition's UPDATE, and its two audit events in one statement.
        with recorded_together():
            transition(
                proposal, target, actor=agent_actor(agent), reason=f"outcome reported ({via})", also=reported
            )
            record(
                proposal.tenant_id,
                actor=agent_actor(agent),
                verb=Verb.OUTCOME_RECORDED,
                subject=proposal_subject(proposal),
                data={
                    "jti": str(jti),
                    "status": status,
                    "transaction_id": proposal.transaction_id,
                    "idempotency_key": str(jti),
                    "detail": proposal.outcome_detail,
                    "via": via,
                },
            )
    return proposal
