"""Delivering one claimed outbox message, and the direct send of a decision right after its commit.

`deliver_claimed()` is what happens to a message once claimed (by a worker's batch claim or by the
direct send): an approval whose decision was revoked or expired meanwhile is withdrawn, anything else is
sent (approvals/a2a/client.py, through the allow-listed transport), then recorded as delivered, or as failed
with its retry and backoff, or dead.

The direct send: a decision's continuation is the hot path (a vote's, or a policy's allowed or denied
decision at intake), so the process that commits it sends it at once instead of waking a worker
(`approvals.wakeup.continuation_queued` calls `send_after_commit` from `transaction.on_commit`). The
commit's caller (a vote's response, an agent's intake) never waits for it: the send runs in a
background thread, at most OUTBOX_DIRECT_SEND_THREADS at a time in a process; beyond that the workers
are woken instead, as for any other message. Exactly one of {this process, every worker} delivers a
message: the direct send claims the row with one conditional UPDATE (pending and due), taking the same
lease a worker's claim takes. The worker stays the retry path, so nothing is lost:

- the send fails: the row is marked failed with its backoff, like a worker's failed attempt;
- the process dies after the commit and before the claim: the row is pending and due, and the next
  worker tick (POLL_SECONDS) claims it;
- it dies after the claim: the lease lapses (LEASE_SECONDS) and a worker delivers it again, with the
  same message id (agents treat a repeated continuation as the same message).
"""

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from django.conf import settings
from django.db import close_old_connections, connection

from approvals import wakeup
from approvals.a2a.client import (
    CALL_DEADLINE_SECONDS,
    DeliveryError,
    cancel_task,
    get_task_state,
    send_continuation,
)
from approvals.models import Decision, OutboxMessage, Proposal
from approvals.notify import webhook_sender
from approvals.services.outbox import (
    claim_outbox_message,
    mark_outbox_delivered,
    mark_outbox_failed,
    withdraw_outbox,
)
from approvals.services.reconcile import apply_task_state
from approvals.states import STARTED, State
from lib import tracing

log = logging.getLogger(__name__)

# A claimed message is not offered to another claimant for this long: longer than one call can take.
LEASE_SECONDS = int(CALL_DEADLINE_SECONDS * 2 + 30)


# --- one claimed message ---------------------------------------------------------------------------


def deliver_claimed(message: OutboxMessage, *, now: datetime | None = None) -> str:
    """Deliver one claimed message; returns "delivered", "failed" or "dead"."""
    label = f"outbox {message.id} {message.kind} {message.message_id} (attempt {message.attempts})"
    state = _approval_state(message)
    if state in {State.REVOKED, State.EXPIRED}:
        # An approval must not leave once its decision was revoked or expired: the agent might act on it
        # before the CancelTask that follows (always, when it need not consume the decision online).
        withdrawn = f"the approval was {state} before it was delivered"
        withdraw_outbox(message.id, reason=withdrawn)
        log.info("%s: withdrawn, %s", label, withdrawn)
        return "dead"
    if state in STARTED:
        # The agent has the decision already: it consumed it, or reported its outcome, having taken it from
        # the intake answer (Prefer: decision-in-answer) or a pull. Sending it would only be ignored.
        note = f"not sent: the agent had the decision (the proposal is {state})"
        mark_outbox_delivered(message.id, note=note, now=now)
        log.info("%s: %s", label, note)
        return "delivered"
    try:
        with tracing.span(
            "reviewer.delivery",
            parent=_trace_parent(message),
            kind=tracing.CLIENT,
            attributes={
                "reviewer.outbox.kind": message.kind,
                "reviewer.outbox.attempt": message.attempts,
                "reviewer.proposal.id": str(message.proposal_id or ""),
                "reviewer.decision.jti": str(message.payload.get("jti", "")),
            },
        ):
            note = send(message)  # the call carries this span's traceparent (approvals/a2a/client.py)
    except Exception as error:  # anything at all: the row must get its retry or its dead letter
        text = str(error) if isinstance(error, DeliveryError) else f"{type(error).__name__}: {error}"
        failed = mark_outbox_failed(message.id, error=text, now=now)
        if failed is not None and failed.status == OutboxMessage.Status.DEAD:
            log.warning("%s: dead after %d attempts: %s", label, failed.attempts, text)
            return "dead"
        retry = f"retry at {failed.next_attempt_at:%H:%M:%S}" if failed else "settled elsewhere"
        log.info("%s: failed, %s: %s", label, retry, text)
        return "failed"
    mark_outbox_delivered(message.id, note=note, now=now)
    log.info("%s: delivered (%s)", label, note)
    return "delivered"


def _trace_parent(message: OutboxMessage) -> str:
    """The proposal's trace (lib/tracing.py); read only while traces are on."""
    if not tracing.enabled() or message.proposal_id is None:
        return ""
    return Proposal.objects.values_list("trace_parent", flat=True).get(pk=message.proposal_id)


def _approval_state(message: OutboxMessage) -> str | None:
    """The proposal's state, for the continuation of an approval (None for any other message)."""
    if (
        message.kind != OutboxMessage.Kind.CONTINUE
        or message.payload.get("decision") != Decision.Kind.APPROVED
    ):
        return None
    return Proposal.objects.values_list("state", flat=True).get(pk=message.proposal_id)


def send(message: OutboxMessage) -> str:
    if message.kind == OutboxMessage.Kind.CONTINUE:
        return send_continuation(message)
    if message.kind == OutboxMessage.Kind.CANCEL:
        return cancel_task(message)
    if message.kind == OutboxMessage.Kind.WEBHOOK:
        return webhook_sender.send(message)  # a tenant's endpoint, signed per Standard Webhooks
    if message.kind == OutboxMessage.Kind.GET_TASK:
        proposal = Proposal.objects.select_related("agent").get(pk=message.proposal_id)
        snapshot = get_task_state(proposal.agent, proposal.task_id)
        apply_task_state(proposal.agent, proposal.task_id, snapshot.state, detail=snapshot.detail)
        return f"task is {snapshot.state}"
    raise ValueError(f"unknown outbox kind {message.kind!r}")


# --- the direct send after commit ------------------------------------------------------------------


class DirectSender:
    """Background threads that send committed continuations from the committing process."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._slots: threading.BoundedSemaphore | None = None

    def __call__(self, message_id: int) -> None:
        """The on-commit hook: hand the message to a sending thread, or wake the workers if every thread
        is busy (or the hand-off fails). Returns at once; never raises."""
        try:
            pool, slots = self._pool_and_slots()
            if not slots.acquire(blocking=False):
                log.info("outbox %s: every direct-send thread is busy; the workers deliver it", message_id)
                wakeup.ring_now()
                return
            try:
                pool.submit(self._send_in_thread, message_id, slots)
            except BaseException:
                slots.release()
                raise
        except Exception:
            log.exception("outbox %s: direct send not started; waking the workers", message_id)
            try:
                wakeup.ring_now()
            except Exception:  # the next worker tick finds it anyway
                log.exception("outbox %s: waking the workers failed too", message_id)

    def _pool_and_slots(self) -> tuple[ThreadPoolExecutor, threading.BoundedSemaphore]:
        with self._lock:
            if self._pool is None or self._slots is None:
                threads = max(1, settings.OUTBOX_DIRECT_SEND_THREADS)
                self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="outbox-direct")
                self._slots = threading.BoundedSemaphore(threads)
            return self._pool, self._slots

    @staticmethod
    def _send_in_thread(message_id: int, slots: threading.BoundedSemaphore) -> None:
        try:
            send_now(message_id)
        except Exception:  # claimed or not, the row is the worker's to retry (backoff, lease or tick)
            log.exception("outbox %s: direct send failed; the worker retries it", message_id)
            connection.close()  # a connection that failed is not reused; the next send opens a new one
            try:
                wakeup.ring_now()
            except Exception:  # the next worker tick finds it anyway
                log.debug("waking the workers failed", exc_info=True)
        finally:
            # The connection obeys CONN_MAX_AGE as a request's does (closed after each send by default;
            # kept with a longer max age or a connection pool).
            close_old_connections()
            slots.release()


def send_now(message_id: int) -> str | None:
    """Claim the message and deliver it here: "delivered", "failed" or "dead", or None if it was not
    pending and due (a worker, or an earlier call, has it)."""
    message = claim_outbox_message(message_id, lease_seconds=LEASE_SECONDS)
    if message is None:
        return None
    return deliver_claimed(message)


send_after_commit = DirectSender()
