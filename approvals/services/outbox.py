"""Outbox delivery (run by the worker; the network call happens between these, outside any transaction)."""

from collections.abc import Collection, Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from approvals.models import OutboxMessage, Proposal
from approvals.services.common import proposal_subject
from approvals.storage.outbox import claim_one
from audit.labels import SYSTEM
from audit.models import Verb
from audit.trail import audit_time, record


def outbox_backoff_seconds(attempts: int) -> int:
    """1, 2, 4, 8 ... seconds after the 1st, 2nd, 3rd ... failed attempt, capped."""
    return min(2 ** max(attempts - 1, 0), settings.OUTBOX_BACKOFF_CAP_SECONDS)


def claim_due_outbox(
    *,
    limit: int = 20,
    lease_seconds: int = 120,
    now: datetime | None = None,
    kinds: Collection[str] | None = None,
    skip_endpoints: Collection[int] = (),
) -> list[OutboxMessage]:
    """Claim due pending messages for one worker: each claim counts an attempt and pushes
    next_attempt_at out by the lease, so no other worker takes the row while it is being delivered
    (and a worker that dies mid-delivery only delays it by the lease). SKIP LOCKED on PostgreSQL lets
    workers claim side by side; elsewhere the compare-and-set on next_attempt_at decides.

    `kinds` keeps a worker job to its own messages (the agents' job never claims a webhook, so a slow
    webhook endpoint never holds a continuation back); `skip_endpoints` leaves the webhooks of endpoints
    in back-off unclaimed: they stay pending and due for a later round."""
    clock = now or timezone.now()
    lease_until = clock + timedelta(seconds=lease_seconds)
    claimed = []
    with transaction.atomic():
        due = OutboxMessage.objects.filter(status=OutboxMessage.Status.PENDING, next_attempt_at__lte=clock)
        if kinds is not None:
            due = due.filter(kind__in=list(kinds))
        if skip_endpoints:
            due = due.exclude(kind=OutboxMessage.Kind.WEBHOOK, payload__endpoint__in=list(skip_endpoints))
        if transaction.get_connection().features.has_select_for_update_skip_locked:
            due = due.select_for_update(skip_locked=True)
        for message in due.order_by("next_attempt_at", "id")[:limit]:
            won = OutboxMessage.objects.filter(
                pk=message.pk,
                status=OutboxMessage.Status.PENDING,
                next_attempt_at=message.next_attempt_at,
            ).update(next_attempt_at=lease_until, attempts=message.attempts + 1)
            if won == 1:
                message.next_attempt_at, message.attempts = lease_until, message.attempts + 1
                claimed.append(message)
    return claimed


def claim_outbox_message(
    message_id: int, *, lease_seconds: int = 120, now: datetime | None = None
) -> OutboxMessage | None:
    """Claim one message by id (the direct send right after its commit), with the same lease a worker's
    claim takes: one conditional UPDATE (pending and due), so exactly one of the direct sender and any
    number of workers wins it. None if it is not pending and due (a worker has it, or it is settled)."""
    clock = now or timezone.now()
    return claim_one(message_id, lease_until=clock + timedelta(seconds=lease_seconds), now=clock)


def release_outbox_claims(messages: Iterable[OutboxMessage], *, until: datetime) -> int:
    """Give claimed messages back unsent, due again at `until`, their claim's attempt not counted: the
    worker claimed them, then found their target in back-off. Compare-and-set on the claim's lease, so
    a row whose lease lapsed and that someone else claimed is left alone. Returns how many it released."""
    released = 0
    for message in messages:
        released += OutboxMessage.objects.filter(
            pk=message.pk, status=OutboxMessage.Status.PENDING, next_attempt_at=message.next_attempt_at
        ).update(next_attempt_at=until, attempts=F("attempts") - 1)
    return released


def _outbox_audit(message: OutboxMessage, verb: str, data: dict):
    proposal = Proposal.objects.only("id", "tenant_id").get(pk=message.proposal_id)
    record(
        proposal.tenant_id,
        actor=SYSTEM,
        verb=verb,
        subject=proposal_subject(proposal),
        data={
            "outbox_id": message.id,
            "kind": message.kind,
            "message_id": message.message_id,
            "attempts": message.attempts,
            **data,
        },
    )


def _locked_pending_outbox(message_id: int) -> OutboxMessage | None:
    """The row, locked, if it still waits for delivery; None once another worker settled it."""
    return (
        OutboxMessage.objects.select_for_update()
        .filter(pk=message_id, status=OutboxMessage.Status.PENDING)
        .first()
    )


def mark_outbox_delivered(message_id: int, *, note: str = "", now: datetime | None = None) -> bool:
    """The agent took the message. False if another worker settled the row first."""
    with transaction.atomic():
        message = _locked_pending_outbox(message_id)
        if message is None:
            return False
        message.status, message.delivered_at = OutboxMessage.Status.DELIVERED, now or timezone.now()
        message.last_error = ""
        message.save(update_fields=["status", "delivered_at", "last_error"])
        _outbox_audit(message, Verb.OUTBOX_DELIVERED, {"note": note[:500]})
    return True


def mark_outbox_failed(message_id: int, *, error: str, now: datetime | None = None) -> OutboxMessage | None:
    """A failed attempt: retry with exponential backoff, or dead-letter after OUTBOX_MAX_ATTEMPTS
    (the row and its last error stay for an operator). None if the row is no longer pending."""
    clock = now or timezone.now()
    error = error[:2000]
    with transaction.atomic():
        message = _locked_pending_outbox(message_id)
        if message is None:
            return None
        message.last_error = error
        if message.attempts >= settings.OUTBOX_MAX_ATTEMPTS:
            message.status = OutboxMessage.Status.DEAD
            message.save(update_fields=["status", "last_error"])
            _outbox_audit(message, Verb.OUTBOX_DEAD, {"error": error})
        else:
            message.next_attempt_at = clock + timedelta(seconds=outbox_backoff_seconds(message.attempts))
            message.save(update_fields=["next_attempt_at", "last_error"])
            _outbox_audit(
                message,
                Verb.OUTBOX_FAILED,
                {"error": error, "next_attempt_at": audit_time(message.next_attempt_at)},
            )
    return message


def withdraw_outbox(message_id: int, *, reason: str) -> bool:
    """Never deliver this message: an approval whose decision was revoked or expired before it left
    (a decision that need not be consumed online would otherwise still be acted on). Kept as dead."""
    with transaction.atomic():
        message = _locked_pending_outbox(message_id)
        if message is None:
            return False
        message.status, message.last_error = OutboxMessage.Status.DEAD, f"withdrawn: {reason}"[:2000]
        message.save(update_fields=["status", "last_error"])
        _outbox_audit(message, Verb.OUTBOX_DEAD, {"withdrawn": True, "reason": reason})
    return True
