"""A decision's continuation is sent by the process that committed it, right after the commit
(approvals/worker/delivery.py), and the worker is its retry path: no worker is needed for the hot path;
the direct send racing two woken workers still delivers each message once; a process killed between
its commit and the send loses nothing (a worker's tick sends it); a lost response to the direct send
is retried by the worker with the same message id.

Real processes, a real agent server (tests/approvals/fake_agent.py) and real HTTP; the one staged fault
is the lost response (the fake agent's front handles the message and answers 502)."""

import functools
import subprocess
import sys
import threading

import pytest
from django.db import connection

from approvals.models import OutboxMessage, Proposal
from approvals.worker import delivery
from tests import factories
from tests.approvals.test_worker import approve, continuation
from tests.e2e.conftest import Stack
from tests.reviewer_processes import REPO
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DELIVERY_DEADLINE = 20


@pytest.fixture
def agent(tenant, fake_agent):
    return factories.make_agent(tenant, card_url=fake_agent.card_url)


def delivered(proposal) -> bool:
    return OutboxMessage.objects.filter(
        proposal=proposal, kind=OutboxMessage.Kind.CONTINUE, status=OutboxMessage.Status.DELIVERED
    ).exists()


def test_a_committed_approval_is_sent_by_the_committing_process_with_no_worker(
    settings, fake_agent, agent, refund_policy, reviewer_a
):
    settings.OUTBOX_DIRECT_SEND = True
    task = fake_agent.open_task()

    proposal, decision = approve(agent, reviewer_a, task)  # no worker runs anywhere

    wait_until(lambda: delivered(proposal), "the approval sent after its commit", timeout=DELIVERY_DEADLINE)
    (received,) = fake_agent.decisions_received()
    assert received.message_id == f"decision-{decision.jti}"
    assert continuation(proposal).attempts == 1


def test_a_policy_allowed_decision_is_sent_right_after_intake_commits(settings, fake_agent, agent, tenant):
    settings.OUTBOX_DIRECT_SEND = True
    factories.make_policy(tenant, "allowed", tool_pattern="payments.refund", outcome="allow")
    task_id, context_id = fake_agent.open_task()

    proposal = factories.submit(agent, task_id=task_id, context_id=context_id)

    wait_until(lambda: delivered(proposal), "the allowed decision sent", timeout=DELIVERY_DEADLINE)
    assert len(fake_agent.decisions_received()) == 1


def test_the_direct_send_racing_two_woken_workers_delivers_each_message_once(
    workers, fake_agent, agent, refund_policy, reviewer_a
):
    """Each commit wakes both workers (direct send off for the commit itself), and the moment it is
    committed two threads of this process send it directly too: four claimants per message."""
    workers(2)
    tasks = [fake_agent.open_task() for _ in range(4)]
    proposals = []
    for task in tasks:
        proposal, _ = approve(agent, reviewer_a, task)  # committed: the workers are woken now
        message_id = continuation(proposal).id
        outcomes: list[str | None] = []

        def send(message_id=message_id, outcomes=outcomes):
            try:
                outcomes.append(delivery.send_now(message_id))
            finally:
                connection.close()

        threads = [threading.Thread(target=send) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=DELIVERY_DEADLINE)
        proposals.append(proposal)

    for proposal in proposals:
        wait_until(
            functools.partial(delivered, proposal), "every approval delivered", timeout=DELIVERY_DEADLINE
        )
    received = [message.message_id for message in fake_agent.decisions_received()]
    assert len(received) == len(set(received)) == 4
    assert all(continuation(p).attempts == 1 for p in proposals)  # claimed once, sent once


def test_a_process_killed_between_its_commit_and_the_send_loses_nothing(
    workers, fake_agent, agent, tenant, tmp_path
):
    """A real process commits a policy-allowed decision (direct send on) and dies right after COMMIT,
    before any after-commit hook runs (os._exit from the first hook): no send, no wake-up. The row
    is pending and due, and a worker's safety-net tick delivers it once."""
    factories.make_policy(tenant, "allowed", tool_pattern="payments.refund", outcome="allow")
    task_id, context_id = fake_agent.open_task()
    script = f"""
import os
from approvals.models import Agent
from lib import commit_hooks
from tests import factories

from approvals import wakeup

queue_continuation = wakeup.continuation_queued


def queued_then_dying(outbox_message_id):
    queue_continuation(outbox_message_id)  # the direct send's hook, first among the commit's hooks
    commit_hooks.on_commit_first(lambda: os._exit(3))  # now first: dies after COMMIT, before the send


# The fault is injected inside intake's own transaction (a durable one: no caller may wrap it).
wakeup.continuation_queued = queued_then_dying
agent = Agent.objects.get(pk={agent.pk})
factories.submit(agent, task_id={task_id!r}, context_id={context_id!r})
"""
    (tmp_path / "dying").mkdir()
    stack = Stack(tmp_path / "dying")
    env = {**stack.env(), "OUTBOX_DIRECT_SEND": "true"}
    stack.listener.close()
    finished = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert finished.returncode == 3, finished.stderr[-3000:]
    proposal = Proposal.objects.get(agent=agent, task_id=task_id)
    message = continuation(proposal)
    assert (message.status, message.attempts) == (OutboxMessage.Status.PENDING, 0)  # committed, unsent
    assert fake_agent.decisions_received() == []

    workers(1, interval="0.5")

    wait_until(lambda: delivered(proposal), "the worker's tick delivers it", timeout=DELIVERY_DEADLINE)
    assert len(fake_agent.decisions_received()) == 1
    assert continuation(proposal).attempts == 1


def test_a_lost_response_to_the_direct_send_is_retried_by_the_worker(
    settings, workers, fake_agent, agent, refund_policy, reviewer_a
):
    settings.OUTBOX_DIRECT_SEND = True
    workers(1, interval="0.5")
    task = fake_agent.open_task()
    fake_agent.drop_next_responses(1)  # the agent handles the direct send; its answer is lost

    proposal, decision = approve(agent, reviewer_a, task)

    wait_until(lambda: delivered(proposal), "the worker's retry delivered", timeout=DELIVERY_DEADLINE)
    message = continuation(proposal)
    assert message.attempts == 2  # the direct send (failed: no answer), then the worker's retry
    received = {r.message_id for r in fake_agent.decisions_received()}
    assert received == {f"decision-{decision.jti}"}  # the same message both times: the agent can tell
