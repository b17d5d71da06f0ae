"""The state machine: `transition()`, the outbox enqueue, revocation and expiry of one proposal."""

from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.utils import timezone

from approvals import events, wakeup
from approvals.models import Decision, OutboxMessage, Proposal, Vote
from approvals.services.common import proposal_subject
from approvals.states import OPEN_FOR_VOTES, WAITING_FOR_PEOPLE, State, check_transition
from approvals.storage.rows import update_held
from audit.labels import SYSTEM
from audit.models import AuditEvent, Verb
from audit.people import display_name
from audit.trail import record
from lib.agent_text import visible
from lib.errors import Conflict


def transition(
    proposal: Proposal,
    target: str,
    *,
    actor: str,
    reason: str = "",
    data: dict | None = None,
    also: dict | None = None,
):
    """The only code that changes Proposal.state. Compare-and-set on (state, rev): a concurrent change
    makes this raise Conflict instead of silently overwriting it. `also`: other fields of the proposal
    written in the same UPDATE (an outcome's transaction id), never its state, rev or stamps."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("transition() must run inside a transaction")
    current = proposal.state
    fields = _transition_fields(proposal, target)
    if also and set(also) & set(fields):
        raise RuntimeError("transition(also=...) may not set the fields a transition sets")
    fields.update(also or {})
    updated = Proposal.objects.filter(pk=proposal.pk, state=current, rev=proposal.rev).update(**fields)
    if updated != 1:
        raise Conflict("concurrent_change", "the proposal changed meanwhile; reload and try again")
    for name, value in fields.items():
        setattr(proposal, name, value)
    record_transition(proposal, current, actor=actor, reason=reason, data=data)
    return proposal


def _transition_fields(proposal: Proposal, target: str) -> dict:
    check_transition(proposal.state, target)
    stamp = timezone.now()
    fields = {"state": target, "rev": proposal.rev + 1}
    if target in {State.APPROVED, State.REJECTED, State.DENIED, State.ALLOWED, State.INFO_REQUESTED}:
        fields["decided_at"] = stamp
    if target == State.EXECUTING:
        fields["executing_since"] = stamp
    if target in {State.SUCCEEDED, State.FAILED}:
        fields["settled_at"] = stamp
    return fields


def first_transition(proposal: Proposal, target: str) -> str:
    """Intake's transition out of `proposed`, on a proposal not stored yet, so that its row is written
    once: the same check and fields as transition(). The caller stores the proposal with
    save(force_insert=True), which refuses one stored already, then calls
    record_transition(proposal, <the returned state>, ...) in the same transaction. Returns the state
    it left."""
    if proposal.state != State.PROPOSED:
        raise RuntimeError("first_transition() is for a new proposal, before it is stored")
    fields = _transition_fields(proposal, target)
    for name, value in fields.items():
        setattr(proposal, name, value)
    return State.PROPOSED


def consume_deadline(proposal: Proposal, decision: Decision) -> datetime:
    """The earliest of the token's lifetime and the proposal's expiry (which already is the earliest of
    the policy's TTL and the request's own `expires_at`): from it on, nothing executes."""
    return min(decision.expires_at, proposal.expires_at)


def held_transition(
    proposal: Proposal, target: str, *, actor: str, reason: str = "", data: dict | None = None
) -> None:
    """A transition of a proposal this transaction inserted (intake's): nobody else sees the row before
    the commit, so there is no compare-and-set to make; its UPDATE is held with intake's other writes
    (approvals/storage/rows.py, `update_held`), so it costs no round trip of its own. Same check,
    fields and audit event as transition()."""
    current = proposal.state
    fields = _transition_fields(proposal, target)
    for name, value in fields.items():
        setattr(proposal, name, value)
    update_held(proposal, list(fields))
    record_transition(proposal, current, actor=actor, reason=reason, data=data)


def record_transition(
    proposal: Proposal, current: str, *, actor: str, reason: str = "", data: dict | None = None
) -> None:
    """The audit event and the live hint of a transition from `current` to the proposal's state."""
    record(
        proposal.tenant_id,
        actor=actor,
        verb=Verb.PROPOSAL_TRANSITIONED,
        subject=proposal_subject(proposal),
        data={"from": current, "to": proposal.state, "reason": reason, "rev": proposal.rev, **(data or {})},
    )
    # Only a proposal stored in this transaction is ever `proposed` (intake, a reviewer's edit).
    events.proposal_changed(proposal, created=current == State.PROPOSED)


def expiry_for(requested: datetime | None, ttl_seconds: int, created: datetime) -> datetime:
    policy_expiry = created + timedelta(seconds=ttl_seconds)
    return min(requested, policy_expiry) if requested else policy_expiry


def supersession_chain(proposal: Proposal) -> list[str]:
    """Request ids this proposal replaces, newest first (what the agent originally asked for is last)."""
    chain, current = [], proposal.supersedes
    while current is not None:
        chain.append(current.request_id)
        current = current.supersedes
    return chain


def enqueue_message(
    proposal: Proposal,
    kind: str,
    *,
    message_id: str,
    payload: dict,
    new: bool = False,
    delay_seconds: int = 0,
) -> OutboxMessage | None:
    """Queue a message for the worker (idempotent on message_id) and wake it when this commits.
    `new`: the message id was made just now (a fresh decision's jti), so there is nothing to look up:
    one INSERT instead of get_or_create's read, savepoint, insert and release. `delay_seconds`: due only
    then, so neither sent right after the commit nor woken for; the worker's tick claims it once due.
    Nothing for a pull agent (no card URL): Reviewer never calls it, it reads its decision by pull (None
    is returned)."""
    if proposal.agent.is_pull:  # the agent is at hand: intake and the decision paths load it
        return None
    fields = {
        "agent_id": proposal.agent_id,
        "proposal": proposal,
        "payload": payload,
        "next_attempt_at": timezone.now() + timedelta(seconds=delay_seconds),
    }
    if new:
        message, created = OutboxMessage.objects.create(kind=kind, message_id=message_id, **fields), True
    else:
        message, created = OutboxMessage.objects.get_or_create(
            kind=kind, message_id=message_id, defaults=fields
        )
    if created and not delay_seconds:  # a delayed one waits for the worker's tick after it is due
        if kind == OutboxMessage.Kind.CONTINUE:
            wakeup.continuation_queued(message.id)  # sent right after commit (approvals/worker/delivery.py)
        else:
            wakeup.outbox_message_queued()
    return message


def revoke_proposal(proposal: Proposal, *, actor: str, reason: str, revoked_by=None):
    decision = Decision.objects.select_for_update().get(proposal=proposal)
    transition(proposal, State.REVOKED, actor=actor, reason=reason, data={"jti": str(decision.jti)})
    decision.revoked_at = timezone.now()
    decision.revoked_by = revoked_by
    decision.revoke_reason = reason
    decision.save(update_fields=["revoked_at", "revoked_by", "revoke_reason"])
    record(
        proposal.tenant_id,
        actor=actor,
        verb=Verb.DECISION_REVOKED,
        subject=proposal_subject(proposal),
        data={"jti": str(decision.jti), "reason": reason},
    )
    enqueue_cancel(proposal, reason=reason)


def enqueue_cancel(proposal: Proposal, *, reason: str) -> OutboxMessage | None:
    """Queue CancelTask for the proposal's task (one per proposal: a second cancel is the same message)."""
    return enqueue_message(
        proposal, OutboxMessage.Kind.CANCEL, message_id=f"cancel-{proposal.id}", payload={"reason": reason}
    )


def expire_proposal(proposal: Proposal, *, reason: str):
    transition(proposal, State.EXPIRED, actor=SYSTEM, reason=reason)
    enqueue_cancel(proposal, reason=reason)


# ---------------------------------------------------------------------------------------------------
# Why a proposal is closed: the reason every refusal gives (vote, question, edit, revoke, consume), on the
# form, the socket and the API alike, instead of a bare "no decision is open here".


def format_moment(moment: datetime | None) -> str:
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if moment else "an unknown time"


def _name(user) -> str:
    return user.get_full_name() or user.get_username()


def _last_transition(proposal: Proposal) -> AuditEvent | None:
    """The audit event that moved the proposal into its current state (who, when, why)."""
    return (
        AuditEvent.objects.filter(
            subject=proposal_subject(proposal), verb=Verb.PROPOSAL_TRANSITIONED, data__to=proposal.state
        )
        .order_by("-at", "-seq")
        .first()
    )


def _decided_by(proposal: Proposal, decision: Decision | None) -> str:
    votes = proposal.votes.select_related("voter").order_by("created_at")
    if proposal.state == State.REJECTED:
        rejecting = votes.filter(verdict=Vote.Verdict.REJECT).first()
        who = _name(rejecting.voter) if rejecting else "a reviewer"
        why = f": {decision.reason}" if decision and decision.reason else ""
        return f"rejected by {who} at {format_moment(proposal.decided_at)}{why}"
    if proposal.state == State.DENIED:
        why = decision.reason if decision else "policy"
        return f"denied by policy at {format_moment(proposal.decided_at)} ({why})"
    if proposal.state == State.INFO_REQUESTED:
        event = _last_transition(proposal)
        who = display_name(event.actor) if event else "a reviewer"
        asked = format_moment(proposal.decided_at)
        return f"{who} asked the agent a question at {asked}; the answer comes as a new proposal"
    approvers = [_name(v.voter) for v in votes.filter(verdict=Vote.Verdict.APPROVE)]
    who = (
        ", ".join(approvers)
        if approvers and decision and decision.kind == Decision.Kind.APPROVED
        else "policy"
    )
    text = f"approved by {who} at {format_moment(proposal.decided_at)}"
    if proposal.executing_since:
        text += f"; the agent started the work at {format_moment(proposal.executing_since)}"
    return text


def closed_reason(proposal: Proposal, clock: datetime | None = None) -> str:
    """Why nobody can decide this proposal any more (expired at …, superseded by …, already decided by …).
    Empty while it is open for votes and not yet expired."""
    clock = clock or timezone.now()
    decision = Decision.objects.filter(proposal=proposal).select_related("revoked_by").first()
    state = proposal.state
    if state == State.SUPERSEDED:
        successor = Proposal.objects.filter(supersedes=proposal).select_related("edited_by").first()
        if successor is None:
            return "it was superseded by a newer request"
        edit = f", an edit by {_name(successor.edited_by)}" if successor.edited_by else ""
        # The request id is the agent's: in its plain-text form, hidden characters written out.
        return f"it was superseded by proposal {successor.id} (request {visible(successor.request_id)}{edit})"
    if state == State.EXPIRED or (state in WAITING_FOR_PEOPLE and clock >= proposal.expires_at):
        deadline = consume_deadline(proposal, decision) if decision else proposal.expires_at
        return f"it expired at {format_moment(deadline)}; nothing will execute, and the agent must ask again"
    if state == State.REVOKED and decision:
        who = _name(decision.revoked_by) if decision.revoked_by else "the system"
        revoked_at = format_moment(decision.revoked_at)
        return f"its decision was revoked at {revoked_at} by {who}: {decision.revoke_reason}"
    if state == State.CANCELLED:
        event = _last_transition(proposal)
        if event is None:
            return "it was cancelled"
        reason = event.data.get("reason") or "no reason recorded"
        return f"it was cancelled at {format_moment(event.at)}: {reason}"
    if state in OPEN_FOR_VOTES:
        return ""
    return "it was already decided: " + _decided_by(proposal, decision)
