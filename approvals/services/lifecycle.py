"""The state machine: `transition()`, the outbox enqueue, revocation and expiry of one proposal."""

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from approvals import events, wakeup
from approvals.models import (
    Decision,
    OutboxMessage,
    Proposal,
)
from approvals.services.common import SYSTEM, proposal_subject, record
from approvals.services.errors import Conflict
from approvals.states import State, check_transition
from audit.models import Verb


def transition(proposal: Proposal, target: str, *, actor: str, reason: str = "", data: dict | None = None):
    """The only code that changes Proposal.state. Compare-and-set on (state, rev): a concurrent change
    makes this raise Conflict instead of silently overwriting it."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("transition() must run inside a transaction")
    current = proposal.state
    check_transition(current, target)
    stamp = timezone.now()
    fields = {"state": target, "rev": proposal.rev + 1}
    if target in {State.APPROVED, State.REJECTED, State.DENIED, State.ALLOWED, State.INFO_REQUESTED}:
        fields["decided_at"] = stamp
    if target == State.EXECUTING:
        fields["executing_since"] = stamp
    if target in {State.SUCCEEDED, State.FAILED}:
        fields["settled_at"] = stamp
    updated = Proposal.objects.filter(pk=proposal.pk, state=current, rev=proposal.rev).update(**fields)
    if updated != 1:
        raise Conflict("concurrent_change", "the proposal changed meanwhile; reload and try again")
    for name, value in fields.items():
        setattr(proposal, name, value)
    record(
        proposal.tenant_id,
        actor=actor,
        verb=Verb.PROPOSAL_TRANSITIONED,
        subject=proposal_subject(proposal),
        data={"from": current, "to": target, "reason": reason, "rev": proposal.rev, **(data or {})},
    )
    events.proposal_changed(proposal)
    return proposal


def _expiry_for(requested: datetime | None, ttl_seconds: int, created: datetime) -> datetime:
    policy_expiry = created + timedelta(seconds=ttl_seconds)
    return min(requested, policy_expiry) if requested else policy_expiry


def supersession_chain(proposal: Proposal) -> list[str]:
    """Request ids this proposal replaces, newest first (what the agent originally asked for is last)."""
    chain, current = [], proposal.supersedes
    while current is not None:
        chain.append(current.request_id)
        current = current.supersedes
    return chain


def _enqueue(proposal: Proposal, kind: str, *, message_id: str, payload: dict) -> OutboxMessage:
    """Queue a message for the worker (idempotent on message_id) and wake it when this commits."""
    message, created = OutboxMessage.objects.get_or_create(
        kind=kind,
        message_id=message_id,
        defaults={
            "agent_id": proposal.agent_id,
            "proposal": proposal,
            "payload": payload,
            "next_attempt_at": timezone.now(),
        },
    )
    if created:
        wakeup.outbox_message_queued()
    return message


def _revoke(proposal: Proposal, *, actor: str, reason: str, revoked_by=None):
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


def enqueue_cancel(proposal: Proposal, *, reason: str) -> OutboxMessage:
    """Queue CancelTask for the proposal's task (one per proposal: a second cancel is the same message)."""
    return _enqueue(
        proposal, OutboxMessage.Kind.CANCEL, message_id=f"cancel-{proposal.id}", payload={"reason": reason}
    )


def _expire(proposal: Proposal, *, reason: str):
    transition(proposal, State.EXPIRED, actor=SYSTEM, reason=reason)
    enqueue_cancel(proposal, reason=reason)
