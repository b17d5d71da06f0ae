"""The worker's ListTasks(status=AUTH_REQUIRED) pass (approvals/a2a/parked_tasks.py), bounded, per
agent, backing off, and only for agents that allow it. The found-and-decided loop against the real refund
agent is tests/e2e/test_contract_e2e.py."""

from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.a2a.client import ListingRefused, forget_cards, list_parked_requests
from approvals.a2a.parked_tasks import PARKED_TASKS_BACKOFF_CAP_SECONDS, ParkedTaskLister
from approvals.models import Halt
from approvals.services.halts import halt
from approvals.worker.loop import TickReport
from tests import factories
from tests.approvals.fake_agent import FakeAgent

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cards(settings):
    settings.AGENT_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]  # the fake agents are on loopback
    forget_cards()
    yield
    forget_cards()


def test_an_agent_whose_card_does_not_declare_the_extension_is_asked_only_after_the_cap(tenant):
    fake = FakeAgent().start()  # a real a2a-sdk server whose card names no approval extension
    try:
        agent = factories.make_agent(tenant, card_url=fake.card_url)
        lister, clock = ParkedTaskLister(every_seconds=60), timezone.now()

        lister.reconcile(TickReport(), clock)

        turn = lister.turns[agent.id]
        assert turn.next_at == clock + timedelta(seconds=PARKED_TASKS_BACKOFF_CAP_SECONDS)
        with pytest.raises(ListingRefused):
            list_parked_requests(agent, page_size=10)
    finally:
        fake.stop()


def test_an_unreachable_agent_backs_off_doubling_up_to_the_cap(tenant):
    agent = factories.make_agent(
        tenant, card_url=f"{FakeAgent.closed_port_url()}/.well-known/agent-card.json"
    )
    lister, clock = ParkedTaskLister(every_seconds=60), timezone.now()

    waits = []
    for _ in range(8):
        lister.reconcile(TickReport(), clock)
        turn = lister.turns[agent.id]
        waits.append((turn.next_at - clock).total_seconds())
        clock = turn.next_at  # the agent's next turn

    assert waits[:3] == [120, 240, 480]
    assert waits[-1] == PARKED_TASKS_BACKOFF_CAP_SECONDS


def test_a_halted_agent_is_not_listed(tenant, admin_user):
    agent = factories.make_agent(
        tenant, card_url=f"{FakeAgent.closed_port_url()}/.well-known/agent-card.json"
    )
    halt(scope=Halt.Scope.AGENT, actor=admin_user, reason="incident", agent=agent)
    lister = ParkedTaskLister(every_seconds=60)

    lister.reconcile(TickReport(), timezone.now())

    assert lister.turns[agent.id].failures == 0  # never called


def test_one_tick_lists_a_bounded_number_of_agents(tenant):
    closed = FakeAgent.closed_port_url()
    agents = [
        factories.make_agent(
            tenant,
            slug=f"agent-{n}",
            push_token=f"p{n}",
            api_token=f"a{n}",
            card_url=f"{closed}/agent-{n}/.well-known/agent-card.json",
        )
        for n in range(7)
    ]
    lister = ParkedTaskLister(every_seconds=60)

    lister.reconcile(TickReport(), timezone.now())

    assert sum(lister.turns[a.id].failures for a in agents) == 5  # PARKED_TASKS_AGENTS_PER_TICK
