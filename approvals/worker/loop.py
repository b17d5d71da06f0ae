"""The delivery worker: one loop that keeps Reviewer's promises to agents.

A decision's continuation is sent by the process that committed it, right after the commit
(approvals/worker/delivery.py); the worker is its retry path. Every other message wakes the worker the moment
it is committed (approvals/wakeup.py: LISTEN/NOTIFY on PostgreSQL, a doorbell socket on SQLite), and it
then delivers at once; every POLL_SECONDS it also runs a full tick, the safety net. Each tick it
1. expires what waited too long (services.reconcile.expire_due);
2. delivers due outbox messages: claim (a short transaction), call the agent (no transaction open),
   then record delivered, a retry with backoff, or a dead letter (services.outbox.mark_outbox_*);
3. reconciles executions with the agent's own task state (GetTask): an execution that has run longer
   than EXECUTING_RECONCILE_SECONDS settles from a terminal task or becomes unknown; an unknown one
   settles once the task completed (see services.reconcile.apply_task_state); a request still awaiting
   review is closed if its task ended (its push may have been lost: A2A push is best-effort). Nothing
   here ever approves anything;
4. chains the audit events pending: in `run()` a thread of its own does it, woken by the appending
   processes' NOTIFY (audit/sequencer_worker.py; with AUDIT_SEQUENCING = "worker" that is where every
   event is chained), in a single tick (`--once`) the tick itself; and runs the audit export jobs
   (audit.jobs.run_pending_exports);
5. sends the reviewers their e-mail digests of new proposals (approvals/worker/notifications.py);
6. records each post-hoc review of a break-glass release that passed its deadline undone, once
   (services.break_glass.note_overdue_reviews);
7. chases proposals that wait (reminders, the escalation step, the admins' notes), keeps Slack and Teams
   in step and pushes to reviewers' devices (approvals/notify/steps.py), and records delegations whose
   period ended;
8. streams the sealed audit events to the SIEM sinks (audit/siem.py).

Several workers (and the direct send) may run side by side: claims never overlap (SKIP LOCKED on
PostgreSQL, a lease written with compare-and-set everywhere), and every message is idempotent on the
agent's side anyway.
"""

import logging
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from approvals import wakeup
from approvals.a2a.client import DeliveryError, get_task_state
from approvals.a2a.parked_tasks import ParkedTaskLister
from approvals.models import Agent, OutboxMessage, Proposal
from approvals.notify import steps as notify_steps
from approvals.services.break_glass import note_overdue_reviews
from approvals.services.outbox import claim_due_outbox
from approvals.services.page_watchers import forget_stale
from approvals.services.reconcile import apply_task_state, expire_due, mark_unknown
from approvals.services.webhooks import feed_from_chain
from approvals.states import WAITING_FOR_PEOPLE, State
from approvals.worker import delivery, notifications
from audit import siem
from audit.chain import sequence_pending
from audit.jobs import run_pending_exports
from audit.sequencer_worker import SequencerThread
from health import heartbeats

log = logging.getLogger(__name__)

# A claimed message is not offered to another claimant for this long: longer than one call can take.
LEASE_SECONDS = delivery.LEASE_SECONDS
# How often one execution's task is asked for its state once it is overdue or unknown. Requests still
# awaiting review are asked every EXECUTING_RECONCILE_SECONDS: a lost push is rare, a queue is long.
RECONCILE_EVERY_SECONDS = 30
# GetTask calls per tick at most, so reconciliation never starves delivery.
RECONCILE_BATCH = 20
# The safety-net tick when nothing wakes the worker: expiry, retries whose backoff ended, reconciliation,
# and any wake-up that was lost. New messages do not wait for it (approvals/wakeup.py).
POLL_SECONDS = 2.0


@dataclass
class TickReport:
    expired: int = 0
    delivered: int = 0
    failed: int = 0
    dead: int = 0
    reconciled: int = 0
    errors: list[str] = field(default_factory=list)


class Worker:
    def __init__(self, *, batch: int = 20, stop: threading.Event | None = None):
        self.batch = batch
        self.stop = stop or threading.Event()
        # proposal id -> when its task was last asked: GetTask at most every RECONCILE_EVERY_SECONDS.
        self._last_checked: dict[str, datetime] = {}
        # Whose waiting requests the last tick looked at, and where each agent's next look goes on.
        self._waiting_agent = 0
        self._waiting_after: dict[int, uuid.UUID | None] = {}
        self.parked_tasks = ParkedTaskLister()  # finds requests whose push was lost (ListTasks)
        # Set once run() listens for wake-ups and finished its first tick (tests and benchmarks wait
        # for it before they commit what they expect to be woken for).
        self.listening = threading.Event()
        self.sequencer: SequencerThread | None = None  # run() starts it; a lone tick sequences itself

    # --- the loop -------------------------------------------------------------------------------

    def run(self, *, interval: float = POLL_SECONDS, once: bool = False) -> None:
        """Tick, then wait for a wake-up (a committed outbox message) or `interval` seconds, whichever
        comes first: delivery is woken, the full tick (expiry, reconciliation, retries) also polls."""
        if once:
            self.tick()
            return
        bell = wakeup.doorbell(self.stop)
        self.sequencer = SequencerThread(self.stop, interval=interval).start()
        try:
            report = self.tick()
            # Started means caught up: what was left pending while no worker ran is chained by now.
            self.sequencer.first_pass.wait()
            self.listening.set()
            log.info(
                "worker started (interval %.1fs, batch %d, woken by %s)",
                interval,
                self.batch,
                type(bell).__name__,
            )
            while not self.stop.is_set():
                if report.delivered + report.failed + report.dead >= self.batch:
                    report = self.tick()  # a full batch means more may be due: go again at once
                    continue
                woken, bell = self._wait(bell, interval)
                if self.stop.is_set():
                    break
                if woken:  # a message was committed: deliver it now, the rest waits for its turn
                    report = TickReport()
                    self._step("delivery", self.deliver_due, report, None)
                else:
                    report = self.tick()
        finally:
            self.stop.set()  # (also when the loop failed: the sequencer thread ends with it)
            bell.close()
            self.sequencer.join(timeout=30)
        log.info("worker stopped")

    def _wait(self, bell, interval: float):
        """Wait up to `interval` for the doorbell, in slices of at most a second so a stop request is
        seen soon. Returns (woken, bell): a broken doorbell (the listening connection dropped) is
        replaced by a new one."""
        remaining = interval
        while remaining > 0 and not self.stop.is_set():
            slice_seconds = min(remaining, 1.0)
            try:
                if bell.wait(slice_seconds):
                    return True, bell
            except Exception:
                log.exception("worker wake-up failed; listening again")
                bell.close()
                bell = wakeup.doorbell(self.stop)
                self.stop.wait(slice_seconds)  # not a hot loop while the database is away
            remaining -= slice_seconds
        return False, bell

    def tick(self, now: datetime | None = None) -> TickReport:
        """One pass over everything the worker does. Each step runs even if an earlier one failed."""
        if not connection.in_atomic_block:  # (tests run a tick inside their transaction)
            close_old_connections()  # a long-lived process must not keep a connection the database dropped
        report = TickReport()
        for name, step in (
            ("audit sequencer", self._sequence),
            ("expiry", self._expire),
            ("webhook feed", lambda report, now: feed_from_chain(now)),  # before delivery: sent this tick
            ("delivery", self.deliver_due),
            ("reconciliation", self.reconcile),
            ("parked tasks", self.parked_tasks.reconcile),
            ("audit jobs", self._audit_jobs),
            ("review digests", lambda report, now: notifications.send_digests(now)),
            ("overdue post-hoc reviews", lambda report, now: note_overdue_reviews(now)),
            *((name, self._notify_step(step)) for name, step in notify_steps.STEPS),
            ("SIEM stream", lambda report, now: siem.stream_pending()),
            ("stale page watchers", lambda report, now: forget_stale(now)),
            ("audit sequencer, the tick's own events", self._sequence),
            ("heartbeat", lambda report, now: heartbeats.record_tick()),  # last: the tick ended (health/)
        ):
            self._step(name, step, report, now)
        return report

    @staticmethod
    def _notify_step(step):
        return lambda report, now: step(now)

    @staticmethod
    def _step(name: str, step, report: TickReport, now: datetime | None) -> None:
        try:
            step(report, now)
        except Exception as error:  # one failing step must not stop the others or the loop
            log.exception("worker %s step failed", name)
            report.errors.append(f"{name}: {error!r}")

    def _sequence(self, report: TickReport, now: datetime | None) -> None:
        if self.sequencer is None:  # else its thread chains, woken at each commit
            sequence_pending()

    def _expire(self, report: TickReport, now: datetime | None) -> None:
        report.expired = expire_due(now)

    # --- delivery -------------------------------------------------------------------------------

    def deliver_due(self, report: TickReport, now: datetime | None = None) -> None:
        for message in claim_due_outbox(limit=self.batch, lease_seconds=LEASE_SECONDS, now=now):
            if self.stop.is_set():
                break  # the rest waits for its lease to lapse; nothing is lost
            outcome = self.deliver(message, now=now)
            setattr(report, outcome, getattr(report, outcome) + 1)

    def deliver(self, message: OutboxMessage, *, now: datetime | None = None) -> str:
        """Deliver one claimed message; returns "delivered", "failed" or "dead" (worker/delivery.py)."""
        return delivery.deliver_claimed(message, now=now)

    # --- reconciliation -------------------------------------------------------------------------

    def reconcile(self, report: TickReport, now: datetime | None = None) -> None:
        clock = now or timezone.now()
        overdue = clock - timedelta(seconds=settings.EXECUTING_RECONCILE_SECONDS)
        # A pull agent has no task state to ask for (no card URL): its outcome is what it reports.
        proposals = Proposal.objects.select_related("agent").filter(agent__delivery=Agent.Delivery.A2A)
        executions = list(proposals.filter(state=State.EXECUTING, executing_since__lte=overdue)) + list(
            proposals.filter(state=State.UNKNOWN)
        )
        due = [p for p in executions if self._due(p, clock, RECONCILE_EVERY_SECONDS)]
        waiting = self._next_waiting(proposals.filter(created_at__lte=overdue, state__in=WAITING_FOR_PEOPLE))
        due += [p for p in waiting if self._due(p, clock, settings.EXECUTING_RECONCILE_SECONDS)]
        for proposal in due[:RECONCILE_BATCH]:
            if self.stop.is_set():
                return
            self._last_checked[str(proposal.id)] = clock
            if self._reconcile_one(proposal):
                report.reconciled += 1
        # A check older than both intervals is due again anyway: what is kept is bounded by the checks
        # of one interval, not by the number of waiting requests.
        horizon = clock - timedelta(
            seconds=max(RECONCILE_EVERY_SECONDS, settings.EXECUTING_RECONCILE_SECONDS)
        )
        self._last_checked = {key: at for key, at in self._last_checked.items() if at > horizon}

    def _next_waiting(self, waiting) -> list[Proposal]:
        """The next RECONCILE_BATCH requests waiting for people of one A2A agent, the agents taking
        turns, each agent's from where its last turn stopped (id order, over the index of what waits by
        agent and id) and starting over after its last: each request gets its turn however long the
        queue, and a tick reads at most one agent's waiting requests (its open ceiling bounds them),
        never the whole queue."""
        agents = sorted(Agent.objects.filter(delivery=Agent.Delivery.A2A).values_list("id", flat=True))
        if not agents:
            return []
        agent_id = next((a for a in agents if a > self._waiting_agent), agents[0])
        self._waiting_agent = agent_id
        waiting = waiting.filter(agent_id=agent_id).order_by("id")
        after = self._waiting_after.get(agent_id)
        if after is not None:
            waiting = waiting.filter(id__gt=after)
        batch = list(waiting[:RECONCILE_BATCH])
        self._waiting_after[agent_id] = batch[-1].id if len(batch) == RECONCILE_BATCH else None
        return batch

    def _due(self, proposal: Proposal, clock: datetime, every: int) -> bool:
        last = self._last_checked.get(str(proposal.id))
        return last is None or (clock - last).total_seconds() >= every

    def _reconcile_one(self, proposal: Proposal) -> bool:
        """Ask the agent for the task's state; returns whether the proposal changed."""
        agent = proposal.agent
        try:
            snapshot = get_task_state(agent, proposal.task_id)
            why = f"the task is still {snapshot.state}"
        except DeliveryError as error:
            snapshot, why = None, str(error)
        if snapshot is not None and snapshot.is_terminal:
            changed = apply_task_state(agent, proposal.task_id, snapshot.state, detail=snapshot.detail)
            if changed:
                log.info(
                    "reconciled proposal %s from task %s: %s", proposal.id, proposal.task_id, snapshot.state
                )
            return bool(changed)
        if proposal.state == State.EXECUTING:
            # Never re-approve: an execution nobody can account for waits in unknown for the agent's word.
            mark_unknown(
                proposal.id,
                reason=f"executing for over {settings.EXECUTING_RECONCILE_SECONDS}s "
                f"without an outcome; {why}",
            )
            log.warning("proposal %s is unknown: %s", proposal.id, why)
            return True
        return False

    # --- the audit app's periodic jobs -----------------------------------------------------------

    def _audit_jobs(self, report: TickReport, now: datetime | None) -> None:
        run_pending_exports()
