"""Delivery is woken, not polled (approvals/wakeup.py). Real `run_worker` processes wait with a safety-net
interval far longer than any deadline here, so a delivery seen within the deadline was woken by the
commit (LISTEN/NOTIFY on PostgreSQL, the doorbell socket on SQLite), not found by a poll: an approval,
a policy-allowed and a policy-denied decision; two woken workers deliver each message once; a
rolled-back transaction wakes nobody."""

import functools
import threading

import pytest
from django.db import transaction

from approvals import wakeup
from approvals.models import OutboxMessage, PolicyVersion
from approvals.services.lifecycle import enqueue_cancel
from tests import factories
from tests.approvals.test_worker import approve, continuation
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DELIVERY_DEADLINE = 20


@pytest.fixture
def agent(tenant, fake_agent):
    return factories.make_agent(tenant, card_url=fake_agent.card_url)


def delivered(proposal) -> bool:
    return OutboxMessage.objects.filter(proposal=proposal, status=OutboxMessage.Status.DELIVERED).exists()


def test_a_committed_approval_wakes_the_waiting_worker(workers, fake_agent, agent, refund_policy, reviewer_a):
    workers(1)
    task = fake_agent.open_task()

    proposal, decision = approve(agent, reviewer_a, task)

    wait_until(lambda: delivered(proposal), "the approval delivered", timeout=DELIVERY_DEADLINE)
    (received,) = fake_agent.decisions_received()
    assert received.message_id == f"decision-{decision.jti}"


@pytest.mark.parametrize("outcome", [PolicyVersion.Outcome.ALLOW, PolicyVersion.Outcome.DENY])
def test_a_policy_decision_wakes_the_waiting_worker(workers, fake_agent, agent, tenant, outcome):
    factories.make_policy(tenant, "by-policy", tool_pattern="payments.refund", outcome=outcome)
    workers(1)
    task_id, context_id = fake_agent.open_task()

    proposal = factories.submit(agent, task_id=task_id, context_id=context_id)

    wait_until(lambda: delivered(proposal), f"the policy's {outcome} delivered", timeout=DELIVERY_DEADLINE)
    assert len(fake_agent.decisions_received()) == 1


def test_two_woken_workers_deliver_each_message_once(workers, fake_agent, agent, refund_policy, reviewer_a):
    workers(2)
    tasks = [fake_agent.open_task() for _ in range(4)]

    proposals = [approve(agent, reviewer_a, task)[0] for task in tasks]

    for proposal in proposals:
        wait_until(
            functools.partial(delivered, proposal), "every approval delivered", timeout=DELIVERY_DEADLINE
        )
    received = [message.message_id for message in fake_agent.decisions_received()]
    assert len(received) == len(set(received)) == 4
    assert all(continuation(p).attempts == 1 for p in proposals)  # claimed once, sent once


def test_a_rolled_back_transaction_queues_and_wakes_nothing(tenant, agent, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    proposal = factories.submit(agent)  # (its own decision's wake-up is over before the bell exists)
    bell = wakeup.doorbell(threading.Event())
    try:
        with pytest.raises(RuntimeError), transaction.atomic():
            enqueue_cancel(proposal, reason="rolled back")
            raise RuntimeError("roll back")

        assert not bell.wait(0.5)  # no commit, no wake-up
        assert not OutboxMessage.objects.filter(proposal=proposal, kind=OutboxMessage.Kind.CANCEL).exists()
    finally:
        bell.close()
