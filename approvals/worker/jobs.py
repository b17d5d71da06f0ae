"""The worker's jobs: one function each, its interval and what wakes it, in one table (`JOBS`).

`run_worker` runs each job on a thread of its own (approvals/worker/loop.py): a job that fails is
logged and runs again at its next interval, and a job waiting on a slow target (Slack, a webhook
endpoint, a mail server, a SIEM) delays only itself, never another job. The calls to people's tools
go through lanes (approvals/notify/lanes.py): a few targets at once, short timeouts, and a back-off per
target, so a dead Slack workspace or webhook endpoint does not hold back the others of its kind
either. `run_worker --once` (and `Worker.tick()`) runs every job once, in the table's order.

`every=None` is the worker's safety-net interval (`--interval`, POLL_SECONDS by default). `woken`: the
job also runs the moment an outbox message is committed (approvals/wakeup.py: LISTEN/NOTIFY on
PostgreSQL, a doorbell socket on SQLite). A job returns True when it did a full batch: it runs again at
once instead of waiting. docs/operations.md, "The worker", lists the jobs for operators.
"""

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from approvals.a2a.parked_tasks import ParkedTaskLister
from approvals.models import OutboxMessage
from approvals.notify import announce, chase, grant_renewals, push, slack_sync, teams
from approvals.notify.lanes import Lane
from approvals.services.break_glass import note_overdue_reviews
from approvals.services.chat_posts import mark_changed_posts_due
from approvals.services.delegations import note_ended_delegations
from approvals.services.grants import ask_for_renewals, lapse_expired_grants
from approvals.services.outbox import claim_due_outbox, release_outbox_claims
from approvals.services.page_watchers import forget_stale
from approvals.services.reconcile import expire_due
from approvals.services.webhooks import feed_from_chain
from approvals.worker import delivery, notifications
from approvals.worker.reconcile import ExecutionReconciler
from approvals.worker.report import TickReport
from audit import siem
from audit.chain.sequencer import sequence_pending
from audit.exports.jobs import run_pending_exports
from health import heartbeats

# The messages Reviewer owes agents (continuations, cancels, GetTask): one job of their own, which
# never claims a webhook, so nothing sent to people ever waits in front of them.
AGENT_KINDS = (OutboxMessage.Kind.CONTINUE, OutboxMessage.Kind.CANCEL, OutboxMessage.Kind.GET_TASK)
# Housekeeping that nothing waits for.
HOUSEKEEPING_SECONDS = 30.0


@dataclass
class Lanes:
    """The worker's lanes to people's tools; `threads=0`: sent in the job's own thread (a single tick)."""

    slack: Lane
    teams: Lane
    webhooks: Lane

    @classmethod
    def with_threads(cls, threads: int) -> "Lanes":
        return cls(
            slack=Lane("slack", threads=threads),
            teams=Lane("teams", threads=threads),
            webhooks=Lane("webhooks", threads=threads),
        )

    def close(self) -> None:
        for lane in (self.slack, self.teams, self.webhooks):
            lane.close()


@dataclass
class JobContext:
    """What the jobs of one worker share: its stop event and batch, and what some jobs remember between
    runs (whose tasks were asked when, the back-off of each target)."""

    stop: threading.Event
    batch: int = 20
    sequencer_running: bool = False  # run_worker's sequencer thread chains; a lone tick chains itself
    lanes: Lanes = field(default_factory=lambda: Lanes.with_threads(0))
    reconciler: ExecutionReconciler = field(init=False)
    parked_tasks: ParkedTaskLister = field(default_factory=ParkedTaskLister)  # lost pushes (ListTasks)
    counting: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self):
        self.reconciler = ExecutionReconciler(self.stop)


JobFunction = Callable[[JobContext, TickReport, datetime | None], bool | None]


@dataclass(frozen=True)
class Job:
    name: str
    run: JobFunction
    every: float | None = None  # seconds between runs; None: the worker's interval
    woken: bool = False  # also run at once when an outbox message is committed
    gates_start: bool = False  # "worker started" is logged once its first run ended
    own_thread: bool = True  # False: run_worker's audit sequencer thread does it (woken by its NOTIFY)


# --- the jobs, in the table's order ------------------------------------------------------------------


def sequence_audit(context: JobContext, report: TickReport, now: datetime | None) -> None:
    """Chain the pending audit events (audit/sequencer_worker.py runs this as a thread in run_worker)."""
    if not context.sequencer_running:
        sequence_pending()


def expire(context: JobContext, report: TickReport, now: datetime | None) -> None:
    report.expired += expire_due(now)


def feed_webhooks(context: JobContext, report: TickReport, now: datetime | None) -> None:
    feed_from_chain(now)


def deliver_outbox(context: JobContext, report: TickReport, now: datetime | None) -> bool:
    """Deliver the due messages agents are owed, one after another (approvals/worker/delivery.py);
    True if it claimed a full batch."""
    claimed = claim_due_outbox(
        limit=context.batch, lease_seconds=delivery.LEASE_SECONDS, now=now, kinds=AGENT_KINDS
    )
    for message in claimed:
        if context.stop.is_set():
            break  # the rest waits for its lease to lapse; nothing is lost
        _count(context, report, delivery.deliver_claimed(message, now=now))
    return len(claimed) >= context.batch


def deliver_webhooks(context: JobContext, report: TickReport, now: datetime | None) -> bool:
    """Deliver the due webhooks, the endpoints side by side in their lane; the webhooks of an endpoint in
    back-off are not claimed, and those a failing endpoint left in this pass are handed back unsent (no
    attempt counted), due when its back-off ends. True if it claimed a full batch."""
    lane = context.lanes.webhooks
    claimed = claim_due_outbox(
        limit=context.batch,
        lease_seconds=delivery.LEASE_SECONDS,
        now=now,
        kinds=[OutboxMessage.Kind.WEBHOOK],
        skip_endpoints=lane.backoff.skipped(),
    )
    by_endpoint: dict[int, list[OutboxMessage]] = {}
    for message in claimed:
        by_endpoint.setdefault(message.payload.get("endpoint"), []).append(message)

    def send(message: OutboxMessage) -> bool:
        outcome = delivery.deliver_claimed(message, now=now)
        _count(context, report, outcome)
        return outcome == "delivered"

    for message in lane.run(by_endpoint, send):
        wait = lane.backoff.seconds_left(message.payload.get("endpoint"))
        release_outbox_claims([message], until=(now or timezone.now()) + timedelta(seconds=wait))
    return len(claimed) >= context.batch


def _count(context: JobContext, report: TickReport, outcome: str) -> None:
    with context.counting:  # (the webhook lane's threads count side by side)
        setattr(report, outcome, getattr(report, outcome) + 1)


def reconcile_executions(context: JobContext, report: TickReport, now: datetime | None) -> None:
    context.reconciler.reconcile(report, now)


def reconcile_parked_tasks(context: JobContext, report: TickReport, now: datetime | None) -> None:
    context.parked_tasks.reconcile(report, now)


def run_audit_exports(context: JobContext, report: TickReport, now: datetime | None) -> None:
    run_pending_exports()


def send_review_digests(context: JobContext, report: TickReport, now: datetime | None) -> None:
    notifications.send_digests(now)


def note_overdue_post_hoc_reviews(context: JobContext, report: TickReport, now: datetime | None) -> None:
    note_overdue_reviews(now)


def chase_follow_ups(context: JobContext, report: TickReport, now: datetime | None) -> None:
    chase.run(now)


def announce_new_proposals(context: JobContext, report: TickReport, now: datetime | None) -> None:
    announce.run(now)


def mark_changed_chat_posts(context: JobContext, report: TickReport, now: datetime | None) -> None:
    mark_changed_posts_due(now)


def sync_slack(context: JobContext, report: TickReport, now: datetime | None) -> None:
    slack_sync.run(now, context.lanes.slack)


def sync_teams(context: JobContext, report: TickReport, now: datetime | None) -> None:
    teams.run(now, context.lanes.teams)


def end_push_subscriptions(context: JobContext, report: TickReport, now: datetime | None) -> None:
    push.run(now)


def note_delegation_ends(context: JobContext, report: TickReport, now: datetime | None) -> None:
    note_ended_delegations(now)


def ask_grant_renewals(context: JobContext, report: TickReport, now: datetime | None) -> None:
    """Standing grants near their expiry: their approvers are asked to renew or let them lapse."""
    for grant, people in ask_for_renewals(now):
        grant_renewals.tell(grant, people)


def lapse_grants(context: JobContext, report: TickReport, now: datetime | None) -> None:
    """Standing grants past their expiry lapse (never renewed silently)."""
    lapse_expired_grants(now)


def stream_to_siem(context: JobContext, report: TickReport, now: datetime | None) -> None:
    siem.stream_pending()


def record_heartbeat(context: JobContext, report: TickReport, now: datetime | None) -> None:
    """This worker process is alive and its job threads run (health/heartbeats.py; /readyz)."""
    heartbeats.record_tick()


def forget_stale_page_watchers(context: JobContext, report: TickReport, now: datetime | None) -> None:
    forget_stale(now)


JOBS = [
    Job("sequence_audit", sequence_audit, own_thread=False),
    Job("expire", expire, gates_start=True),
    Job("feed_webhooks", feed_webhooks),  # before delivery: a single tick sends what it queued
    Job("deliver_outbox", deliver_outbox, woken=True, gates_start=True),
    Job("deliver_webhooks", deliver_webhooks),
    Job("reconcile_executions", reconcile_executions),
    Job("reconcile_parked_tasks", reconcile_parked_tasks),
    Job("run_audit_exports", run_audit_exports),
    Job("send_review_digests", send_review_digests),
    Job("note_overdue_post_hoc_reviews", note_overdue_post_hoc_reviews, every=HOUSEKEEPING_SECONDS),
    # Chasing first (it records reminders and escalations the channels then show), then announcing
    # (it plans the chat posts), then marking the posts of changed proposals due, then each channel.
    Job("chase_follow_ups", chase_follow_ups),
    Job("announce_new_proposals", announce_new_proposals),
    Job("mark_changed_chat_posts", mark_changed_chat_posts),
    Job("sync_slack", sync_slack),
    Job("sync_teams", sync_teams),
    Job("end_push_subscriptions", end_push_subscriptions, every=HOUSEKEEPING_SECONDS),
    Job("note_delegation_ends", note_delegation_ends),
    Job("ask_grant_renewals", ask_grant_renewals, every=HOUSEKEEPING_SECONDS),
    Job("lapse_grants", lapse_grants, every=HOUSEKEEPING_SECONDS),
    Job("stream_to_siem", stream_to_siem),
    Job("forget_stale_page_watchers", forget_stale_page_watchers, every=HOUSEKEEPING_SECONDS),
    Job("record_heartbeat", record_heartbeat),  # last: /readyz's worker check reads it (health/)
]


def interval_of(job: Job, default: float) -> float:
    return job.every if job.every is not None else default


def threads_for_lanes() -> int:
    return max(1, settings.NOTIFY_THREADS)
