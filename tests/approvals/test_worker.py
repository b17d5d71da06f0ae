"""The delivery worker against a real A2A agent on loopback (tests/approvals/fake_agent.py): decisions
and cancels are delivered once, failures are retried with capped exponential backoff and dead-lettered,
executions are reconciled with GetTask, and two workers never claim the same message."""

import threading
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from accounts.stepup import step_up_for
from approvals.a2a.client import failure_text
from approvals.a2a.push import EXTENSION_URI
from approvals.models import Decision, OutboxMessage, Proposal
from approvals.services.decisions import consume_decision, revoke_decision
from approvals.services.outbox import claim_due_outbox, outbox_backoff_seconds
from approvals.services.votes import cast_vote
from approvals.states import State
from approvals.worker.loop import Worker
from approvals.worker.reconcile import RECONCILE_EVERY_SECONDS
from audit.chain.sequencer import sequence_pending
from audit.chain.verification import verify_chain
from audit.models import AuditEvent, Verb
from tests import factories
from tests.approvals.fake_agent import FakeAgent
from tests.factories import totp_code

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent(tenant, fake_agent):
    return factories.make_agent(tenant, card_url=fake_agent.card_url)


@pytest.fixture
def task(fake_agent):
    """A task the agent parked, waiting for Reviewer: (task_id, context_id)."""
    return fake_agent.open_task()


def approve(agent, reviewer, task) -> tuple[Proposal, Decision]:
    proposal = factories.submit(agent, task_id=task[0], context_id=task[1])
    cast_vote(
        proposal.id,
        reviewer,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer, totp_code(reviewer)),
    )
    return Proposal.objects.get(pk=proposal.pk), Decision.objects.get(proposal=proposal)


def continuation(proposal) -> OutboxMessage:
    return OutboxMessage.objects.get(proposal=proposal, kind=OutboxMessage.Kind.CONTINUE)


def outbox_verbs(proposal) -> list[str]:
    sequence_pending()  # what the on-commit hook does outside the test's transaction
    return list(
        AuditEvent.objects.filter(subject=f"proposal:{proposal.id}", verb__startswith="outbox.")
        .order_by("seq")
        .values_list("verb", flat=True)
    )


# --- delivery --------------------------------------------------------------------------------------


def test_an_approval_reaches_the_agent_once_with_the_signed_decision(
    fake_agent, agent, refund_policy, requester, reviewer_a, task
):
    proposal, decision = approve(agent, reviewer_a, task)

    report = Worker().tick()
    Worker().tick()  # nothing left to send

    assert report.delivered == 1
    (received,) = fake_agent.decisions_received()
    assert received.task_id == proposal.task_id
    assert received.message_id == f"decision-{decision.jti}"
    assert received.metadata[EXTENSION_URI] == {"decision": decision.token}
    assert "Approved" in received.text
    message = continuation(proposal)
    assert (message.status, message.attempts, message.last_error) == (OutboxMessage.Status.DELIVERED, 1, "")
    assert outbox_verbs(proposal) == [Verb.OUTBOX_DELIVERED]
    assert verify_chain(f"tenant:{proposal.tenant_id}").ok


def test_deliveries_to_one_agent_reuse_one_connection(
    fake_agent, agent, refund_policy, requester, reviewer_a
):
    """One HTTP client per agent lives across calls: no new TCP (or TLS) handshake per delivery."""
    for _ in range(3):
        approve(agent, reviewer_a, fake_agent.open_task())
    fake_agent.front.client_addresses.clear()  # (open_task's own requests)

    report = Worker().tick()

    assert report.delivered == 3
    assert len(fake_agent.front.client_addresses) >= 3
    assert len(set(fake_agent.front.client_addresses)) == 1


def test_an_agent_card_naming_an_interface_on_another_origin_is_never_called(
    fake_agent, tenant, refund_policy, requester, reviewer_a, task
):
    # Registered under another host name than the one its (agent-controlled) card names.
    elsewhere = factories.make_agent(tenant, card_url=fake_agent.card_url.replace("127.0.0.1", "localhost"))
    proposal, _ = approve(elsewhere, reviewer_a, task)

    Worker().tick()

    assert fake_agent.decisions_received() == []
    message = continuation(proposal)
    assert message.status == OutboxMessage.Status.PENDING and "registered origin" in message.last_error


def test_a_failing_agent_is_retried_with_exponential_backoff_until_it_answers(
    fake_agent, agent, refund_policy, requester, reviewer_a, task
):
    proposal, _ = approve(agent, reviewer_a, task)
    fake_agent.fail_next(3)
    start = timezone.now()
    worker = Worker()

    schedule = []
    for offset in (0, 0, 1, 3, 7):  # the second tick at +0 finds nothing due
        worker.tick(now=start + timedelta(seconds=offset))
        message = continuation(proposal)
        schedule.append((message.status, message.attempts, (message.next_attempt_at - start).total_seconds()))

    assert [row[:2] for row in schedule] == [
        ("pending", 1),
        ("pending", 1),
        ("pending", 2),
        ("pending", 3),
        ("delivered", 4),
    ]
    assert [round(row[2]) for row in schedule[:4]] == [1, 1, 3, 7]  # next try after 1, 2, 4 seconds
    assert fake_agent.front.refused == 3
    assert len(fake_agent.decisions_received()) == 1
    assert outbox_verbs(proposal) == [Verb.OUTBOX_FAILED] * 3 + [Verb.OUTBOX_DELIVERED]
    failure = AuditEvent.objects.filter(verb=Verb.OUTBOX_FAILED).first()
    assert "could not reach the agent" in failure.data["error"]  # generic; the 503 is in the log


def test_backoff_doubles_and_stops_at_the_cap(settings):
    settings.OUTBOX_BACKOFF_CAP_SECONDS = 20

    assert [outbox_backoff_seconds(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 20, 20]


def test_a_message_the_agent_never_takes_is_dead_lettered_with_its_last_error(
    fake_agent, agent, refund_policy, requester, reviewer_a, task, settings
):
    settings.OUTBOX_MAX_ATTEMPTS = 3
    proposal, _ = approve(agent, reviewer_a, task)
    fake_agent.fail_next(1000)
    later = timezone.now()
    worker = Worker()

    for _ in range(5):
        later += timedelta(seconds=settings.OUTBOX_BACKOFF_CAP_SECONDS)
        worker.tick(now=later)

    message = continuation(proposal)
    assert (message.status, message.attempts) == (OutboxMessage.Status.DEAD, 3)
    # Generic: what the agent host answered (here HTTP 503) is in the worker log, not in the outbox.
    assert "could not reach the agent" in message.last_error and "503" not in message.last_error
    assert fake_agent.front.refused == 3
    assert outbox_verbs(proposal) == [Verb.OUTBOX_FAILED, Verb.OUTBOX_FAILED, Verb.OUTBOX_DEAD]
    assert AuditEvent.objects.get(verb=Verb.OUTBOX_DEAD).data["error"] == message.last_error


def test_an_agent_that_is_not_listening_is_retried(tenant, refund_policy, requester, reviewer_a, settings):
    settings.AGENT_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    agent = factories.make_agent(
        tenant, card_url=f"{FakeAgent.closed_port_url()}/.well-known/agent-card.json"
    )
    proposal, _ = approve(agent, reviewer_a, ("task-1", "ctx-1"))

    report = Worker().tick()

    assert report.failed == 1
    message = continuation(proposal)
    assert message.status == OutboxMessage.Status.PENDING
    assert message.last_error == f"refund-demo: {failure_text(OSError())}"


def test_a_rejection_to_a_task_that_already_ended_counts_as_delivered(
    fake_agent, agent, refund_policy, requester, reviewer_a, task
):
    proposal = factories.submit(agent, task_id=task[0], context_id=task[1])
    fake_agent.cancel(task[0])  # the agent's user gave up meanwhile
    cast_vote(
        proposal.id,
        reviewer_a,
        verdict="reject",
        reason="wrong customer",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
    )

    Worker().tick()

    message = continuation(proposal)
    assert message.status == OutboxMessage.Status.DELIVERED
    assert (
        AuditEvent.objects.get(verb=Verb.OUTBOX_DELIVERED).data["note"] == "task already TASK_STATE_CANCELED"
    )
    assert fake_agent.decisions_received() == []


def test_a_revoked_approval_is_withdrawn_and_its_task_cancelled(
    fake_agent, agent, refund_policy, requester, reviewer_a, task
):
    proposal, _ = approve(agent, reviewer_a, task)
    revoke_decision(proposal.id, reviewer_a, reason="wrong order")

    Worker().tick()

    assert continuation(proposal).status == OutboxMessage.Status.DEAD
    assert continuation(proposal).last_error.startswith("withdrawn")
    cancel = OutboxMessage.objects.get(proposal=proposal, kind=OutboxMessage.Kind.CANCEL)
    assert cancel.status == OutboxMessage.Status.DELIVERED
    assert fake_agent.decisions_received() == []
    assert fake_agent.executor.cancelled == [task[0]]
    assert fake_agent.state_of(task[0]) == "TASK_STATE_CANCELED"


def test_cancelling_a_task_that_already_ended_counts_as_delivered(
    fake_agent, agent, refund_policy, requester, reviewer_a, task
):
    proposal, _ = approve(agent, reviewer_a, task)
    Worker().tick()  # delivered: the fake agent completes the task
    assert fake_agent.state_of(task[0]) == "TASK_STATE_COMPLETED"
    OutboxMessage.objects.create(
        agent=agent,
        proposal=proposal,
        kind=OutboxMessage.Kind.CANCEL,
        message_id=f"cancel-{proposal.id}",
        next_attempt_at=timezone.now(),
    )

    Worker().tick()

    cancel = OutboxMessage.objects.get(proposal=proposal, kind=OutboxMessage.Kind.CANCEL)
    assert cancel.status == OutboxMessage.Status.DELIVERED


# --- expiry and reconciliation ---------------------------------------------------------------------


def test_a_tick_expires_what_waited_too_long(agent, refund_policy, requester):
    proposal = factories.submit(agent, expires_at=factories.in_seconds(60))

    Worker().tick(now=timezone.now() + timedelta(seconds=61))

    proposal.refresh_from_db()
    assert proposal.state == State.EXPIRED
    assert OutboxMessage.objects.filter(proposal=proposal, kind=OutboxMessage.Kind.CANCEL).exists()


def test_an_execution_whose_task_completed_is_settled_from_get_task(
    fake_agent, agent, refund_policy, requester, reviewer_a, task, settings
):
    proposal, decision = approve(agent, reviewer_a, task)
    Worker().tick()  # the decision is delivered and the fake agent completes the task (it pushes nothing)
    consume_decision(agent, decision.jti, rev=decision.rev)

    Worker().tick(now=timezone.now() + timedelta(seconds=settings.EXECUTING_RECONCILE_SECONDS + 1))

    proposal.refresh_from_db()
    assert proposal.state == State.SUCCEEDED
    assert Decision.objects.count() == 1  # nothing was approved again


def test_an_execution_that_never_ends_becomes_unknown_then_settles(
    fake_agent, agent, refund_policy, requester, reviewer_a, task, settings
):
    fake_agent.executor.finish = False  # the agent starts the work and then says nothing
    proposal, decision = approve(agent, reviewer_a, task)
    worker = Worker()
    worker.tick()
    consume_decision(agent, decision.jti, rev=decision.rev)
    overdue = timezone.now() + timedelta(seconds=settings.EXECUTING_RECONCILE_SECONDS + 1)

    worker.tick(now=overdue)
    proposal.refresh_from_db()
    assert proposal.state == State.UNKNOWN

    worker.tick(now=overdue + timedelta(seconds=1))  # asked again only after RECONCILE_EVERY_SECONDS
    fake_agent.executor.finish = True
    fake_agent.message_task(*task)  # the work ends
    worker.tick(now=overdue + timedelta(seconds=1))
    proposal.refresh_from_db()
    assert proposal.state == State.UNKNOWN

    worker.tick(now=overdue + timedelta(seconds=RECONCILE_EVERY_SECONDS + 1))
    proposal.refresh_from_db()
    assert proposal.state == State.SUCCEEDED
    assert Decision.objects.count() == 1


def test_an_execution_whose_agent_is_unreachable_becomes_unknown(
    fake_agent, agent, refund_policy, requester, reviewer_a, task, settings
):
    proposal, decision = approve(agent, reviewer_a, task)
    Worker().tick()
    consume_decision(agent, decision.jti, rev=decision.rev)
    fake_agent.fail_next(1000)

    Worker().tick(now=timezone.now() + timedelta(seconds=settings.EXECUTING_RECONCILE_SECONDS + 1))

    proposal.refresh_from_db()
    assert proposal.state == State.UNKNOWN
    assert (
        "could not reach the agent"
        in AuditEvent.objects.filter(verb=Verb.PROPOSAL_TRANSITIONED, data__to="unknown").get().data["reason"]
    )


def test_a_request_whose_task_ended_unseen_is_closed(fake_agent, agent, refund_policy, task, settings):
    proposal = factories.submit(agent, task_id=task[0], context_id=task[1])
    fake_agent.cancel(task[0])  # its push (if any) was lost

    Worker().tick(now=timezone.now() + timedelta(seconds=settings.EXECUTING_RECONCILE_SECONDS + 1))

    proposal.refresh_from_db()
    assert proposal.state == State.CANCELLED


def test_waiting_requests_are_asked_in_turns_agent_by_agent(
    fake_agent, agent, tenant, refund_policy, settings, monkeypatch
):
    from tests.approvals.fake_agent import FakeAgent

    monkeypatch.setattr("approvals.worker.reconcile.RECONCILE_BATCH", 1)  # one GetTask a tick
    second = FakeAgent().start()
    try:
        other = factories.make_agent(
            tenant, slug="second", card_url=second.card_url, push_token="p2", api_token="a2"
        )
        proposals = []
        for registered, server in ((agent, fake_agent), (other, second)):
            for order in ("1", "2"):
                task_id, context_id = server.open_task()
                action = factories.refund_action(order_id=f"{registered.slug}-{order}")
                proposals.append(
                    factories.submit(registered, task_id=task_id, context_id=context_id, action=action)
                )
                server.cancel(task_id)  # its push (if any) was lost
        worker = Worker()
        later = timezone.now() + timedelta(seconds=settings.EXECUTING_RECONCILE_SECONDS + 1)
        for tick in range(4):  # the agents take turns, each from where its last turn stopped
            worker.tick(now=later + timedelta(seconds=tick))
    finally:
        second.stop()
    assert [Proposal.objects.get(pk=p.pk).state for p in proposals] == [State.CANCELLED] * 4


# --- other jobs, the command -----------------------------------------------------------------------


def test_each_tick_runs_the_audit_export_jobs(monkeypatch):
    calls = []
    monkeypatch.setattr("approvals.worker.jobs.run_pending_exports", lambda: calls.append(1))

    report = Worker().tick()

    assert calls == [1]
    assert report.errors == []


def test_a_failing_step_does_not_stop_the_others(monkeypatch, agent, refund_policy, requester):
    proposal = factories.submit(agent, expires_at=factories.in_seconds(60))
    monkeypatch.setattr("approvals.worker.jobs.run_pending_exports", lambda: 1 / 0)

    report = Worker().tick(now=timezone.now() + timedelta(seconds=61))

    assert report.expired == 1
    assert report.errors and "ZeroDivisionError" in report.errors[0]
    proposal.refresh_from_db()
    assert proposal.state == State.EXPIRED


def test_run_worker_once_delivers_and_exits(fake_agent, agent, refund_policy, requester, reviewer_a, task):
    proposal, _ = approve(agent, reviewer_a, task)

    call_command("run_worker", "--once")

    assert continuation(proposal).status == OutboxMessage.Status.DELIVERED


# Committed data and no transaction held by the test: on SQLite an open test transaction would hold the
# write lock that the worker's first tick waits for, and the stop would be seen only after that.
@pytest.mark.django_db(transaction=True)
def test_run_worker_stops_when_asked(agent):
    stop = threading.Event()
    worker = Worker(stop=stop)
    thread = threading.Thread(target=worker.run, kwargs={"interval": 60})
    thread.start()
    stop.set()
    thread.join(timeout=10)

    assert not thread.is_alive()


# --- claims ----------------------------------------------------------------------------------------


def make_outbox(agent, count: int) -> list[int]:
    proposal = factories.submit(agent)
    return [
        OutboxMessage.objects.create(
            agent=agent,
            proposal=proposal,
            kind=OutboxMessage.Kind.GET_TASK,
            message_id=f"m-{n}",
            next_attempt_at=timezone.now(),
        ).id
        for n in range(count)
    ]


def test_a_claimed_message_is_not_offered_again_while_its_lease_runs(agent, refund_policy):
    ids = make_outbox(agent, 3)

    first = claim_due_outbox(limit=2)
    second = claim_due_outbox(limit=10)
    third = claim_due_outbox(limit=10)

    assert len(first) == 2
    assert {m.id for m in first} | {m.id for m in second} == set(ids)
    assert third == []


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_workers_claim_disjoint_messages_on_postgresql(tenant, refund_policy):
    from django.conf import settings as django_settings
    from django.db import connection

    if not django_settings.IS_POSTGRES:
        pytest.skip("SKIP LOCKED claims need PostgreSQL (set DATABASE_URL)")
    agent = factories.make_agent(tenant)
    ids = set(make_outbox(agent, 60))
    start = threading.Barrier(4)
    claimed: list[list[int]] = []

    def claim():
        try:
            start.wait(timeout=10)
            mine = []
            while batch := claim_due_outbox(limit=5):
                mine += [m.id for m in batch]
            claimed.append(mine)
        finally:
            connection.close()

    threads = [threading.Thread(target=claim) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    everything = [message_id for mine in claimed for message_id in mine]
    assert len(claimed) == 4
    assert sorted(everything) == sorted(ids)  # every message once, none twice
    assert OutboxMessage.objects.filter(attempts=1).count() == 60
