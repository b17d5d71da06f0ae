"""More requests waiting than a tick takes at once: every one is still announced on every channel,
chased at its times and kept in step in chat, and a tick with nothing due costs the same whether 3 or
30 requests wait (the worker reads what is due, not the queue).

Each step's batch is made small here (2) so that five requests are a long queue; before, each step
took the first batch of open requests by id at every tick, and everything after it waited for those to
close. Slack, Teams and the push service are the loopback stand-ins of the other notification tests."""

import json

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.models.notifications import SlackPost
from approvals.notify import announce, chase, slack_sync, teams
from approvals.worker.loop import Worker
from audit.models import AuditEvent, Verb
from tests import factories

pytestmark = pytest.mark.django_db

WAITING = 5


@pytest.fixture
def small_batches(monkeypatch):
    for step in (announce, chase, slack_sync, teams):
        monkeypatch.setattr(step, "BATCH", 2)


@pytest.fixture
def agent(tenant):
    """A pull agent: nothing for the worker to ask at a card URL, so a tick is the notification work."""
    return factories.make_agent(tenant, card_url="")


@pytest.fixture
def two_approvals(tenant):
    """Refunds need two finance approvals, with a reminder halfway through their 1000 s."""
    return factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        thresholds=[{"group": "finance", "count": 2}],
        ttl_seconds=1000,
        notifications={"reminders": [50]},
    )


def submit_refunds(agent, count: int, first: int = 0) -> list:
    return [
        factories.submit(agent, action=factories.refund_action(order_id=str(1000 + n)))
        for n in range(first, first + count)
    ]


def ticks(count: int, **kwargs) -> None:
    for _ in range(count):
        Worker().tick(**kwargs)


def test_every_new_request_is_announced_on_every_channel_however_many_wait(
    small_batches,
    agent,
    two_approvals,
    workspace,
    slack,
    channel,
    push_service,
    requester,
    reviewer_a,
    reviewer_b,
):
    factories.subscribe_push_device(reviewer_a, push_service.subscription("/push/alice"))
    proposals = submit_refunds(agent, WAITING)
    ticks(3)  # two announced per tick: 2 + 2 + 1
    assert len(slack.calls_to("chat.postMessage")) == WAITING
    assert len(channel.cards) == WAITING
    pushed = [d["payload"] for d in push_service.delivered if d["payload"]["title"] == "Approval requested"]
    assert sorted(p["tag"] for p in pushed) == sorted(str(p.id) for p in proposals)
    ticks(2)
    assert len(slack.calls_to("chat.postMessage")) == WAITING  # each once
    assert len(channel.cards) == WAITING and len(push_service.delivered) == WAITING


def test_a_vote_on_a_request_far_down_the_queue_reaches_its_slack_message_at_the_next_tick(
    small_batches, agent, two_approvals, workspace, slack, requester, reviewer_a, reviewer_b
):
    *_, last = submit_refunds(agent, WAITING)
    ticks(3)
    factories.vote(last, reviewer_a)
    Worker().tick()
    (update,) = slack.calls_to("chat.update")
    post = SlackPost.objects.get(proposal=last)
    assert (update["channel"], update["ts"]) == (post.posted_channel, post.ts)
    assert "Waiting for review: 1 of 2 approvals" in json.dumps(update["blocks"])


def test_every_request_is_reminded_at_its_time_behind_a_full_batch(
    small_batches, agent, two_approvals, requester, reviewer_a
):
    proposals = submit_refunds(agent, WAITING)
    ticks(3)  # each request's first look (reachability), two per tick
    halfway = proposals[-1].created_at + (proposals[-1].expires_at - proposals[-1].created_at) / 2
    with time_machine.travel(halfway, tick=False):
        ticks(3)
    reminded = AuditEvent.objects.filter(verb=Verb.PROPOSAL_REMINDED).values_list("subject", flat=True)
    assert sorted(reminded) == sorted(f"proposal:{p.id}" for p in proposals)


def tick_queries() -> int:
    with CaptureQueriesContext(connection) as captured:
        Worker().tick()
    return len(captured)


def test_a_tick_with_nothing_due_reads_as_much_for_3_waiting_requests_as_for_30(
    agent, two_approvals, workspace, slack, channel, push_service, requester, reviewer_a, reviewer_b
):
    factories.subscribe_push_device(reviewer_a, push_service.subscription("/push/alice"))
    submit_refunds(agent, 3)
    ticks(2)  # announced, looked at, fanned out to digests, posted
    with_3 = tick_queries()
    submit_refunds(agent, 27, first=3)
    ticks(2)
    with_30 = tick_queries()
    assert len(slack.calls_to("chat.postMessage")) == 30  # they were all announced
    assert with_30 == with_3
