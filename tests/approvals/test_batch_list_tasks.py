"""A batch parked in an A2A task whose push was lost is found by the worker's ListTasks pass, as a single
request is (docs/agents/batches.md#over-a2a): a real a2a-sdk agent on loopback parks the task with the
batch on its status message; the lister takes it in once, all or nothing, and only when every member
names the registration it was found at."""

from dataclasses import dataclass, field

import pytest
from a2a.helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import AgentCapabilities, AgentExtension
from django.utils import timezone

from approvals.a2a.client import forget_cards
from approvals.a2a.parked_tasks import ParkedTaskLister
from approvals.a2a.push import EXTENSION_URI
from approvals.canonical import manifest_digest
from approvals.models import Batch, Proposal
from audit.models import AuditEvent, Verb
from tests import factories
from tests.approvals.fake_agent import FakeAgent
from tests.factories import approval_request, refund_action

pytestmark = pytest.mark.django_db(transaction=True)  # the agent answers from its own thread


@dataclass
class ParksABatch(AgentExecutor):
    """Parks each new task in auth-required with `batch` under Reviewer's extension, pushing nothing."""

    batch: dict
    parked: list[str] = field(default_factory=list)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None and context.task_id is not None and context.context_id is not None
        await event_queue.enqueue_event(new_task_from_user_message(context.message))
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        ask = updater.new_agent_message(
            [new_text_part("waiting for approval")], metadata={EXTENSION_URI: {"batch": self.batch}}
        )
        await updater.requires_auth(ask)
        self.parked.append(context.task_id)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


class BatchAgent(FakeAgent):
    def capabilities(self) -> AgentCapabilities:
        return AgentCapabilities(
            streaming=False, push_notifications=False, extensions=[AgentExtension(uri=EXTENSION_URI)]
        )


def parked_batch(count: int, *, agent: str | None) -> dict:
    members = [
        approval_request(
            action=refund_action(order_id=str(2000 + i), amount="25.00"),
            request_id=f"refund-{2000 + i}",
            consequences={"reversible": True},
            **({"agent": agent} if agent else {}),
        )
        for i in range(count)
    ]
    return {
        "batch_id": "outage-refunds",
        "summary": "Refunds after the outage",
        "manifest_digest": manifest_digest([m["action_digest"] for m in members]),
        "members": members,
    }


@pytest.fixture(autouse=True)
def _loopback_agents(settings):
    settings.AGENT_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]
    forget_cards()
    yield
    forget_cards()


@pytest.fixture
def batch_policy(tenant):
    return factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        thresholds=[{"group": "finance", "count": 1}],
        batch={"max_members": 25, "max_total": {"EUR": "1000.00"}},
    )


def test_a_parked_batch_whose_push_was_lost_is_taken_in_once_by_listing(tenant, batch_policy):
    fake = BatchAgent(ParksABatch(parked_batch(3, agent="refund-demo"))).start()
    try:
        agent = factories.make_agent(tenant, card_url=fake.card_url)
        task_id, _ = fake.open_task()
        lister = ParkedTaskLister(every_seconds=60)

        assert lister.list_agent(agent, timezone.now()) == 1
        assert lister.list_agent(agent, timezone.now()) == 0  # found again: the same batch, nothing new

        batch = Batch.objects.get()
        assert (batch.task_id, batch.batch_id) == (task_id, "outage-refunds")
        assert Proposal.objects.filter(task_id=task_id).count() == 3
        submitted = AuditEvent.objects.filter(verb=Verb.BATCH_SUBMITTED).get()
        assert submitted.data["via"] == "list_tasks"
    finally:
        fake.stop()


@pytest.mark.parametrize("named", ["someone-else", None], ids=["another", "none"])
def test_a_parked_batch_naming_another_registration_or_none_is_not_adopted(tenant, batch_policy, named):
    fake = BatchAgent(ParksABatch(parked_batch(2, agent=named))).start()
    try:
        agent = factories.make_agent(tenant, card_url=fake.card_url)
        fake.open_task()
        lister = ParkedTaskLister(every_seconds=60)

        assert lister.list_agent(agent, timezone.now()) == 0

        assert not Batch.objects.exists() and not Proposal.objects.exists()
    finally:
        fake.stop()
