"""Lost pushes and halts against the real stack (Daphne, the worker, the real refund agent over A2A):

- a task parked with no push config, by an agent that does not POST its request either, is found by the
  worker's ListTasks(status=AUTH_REQUIRED) and decided like any other;
- a halt leaves nothing of the agent pending: a task parked for review is cancelled at the agent.
"""

import asyncio
import uuid

import pytest
from a2a.types import Message, Part, Role, SendMessageConfiguration, SendMessageRequest

from accounts.stepup import step_up_for
from approvals.models import Decision, Halt, Proposal
from approvals.services.halts import halt, resume
from approvals.services.votes import cast_vote
from approvals.states import State
from audit.models import AuditEvent, Verb
from lib.errors import VoteRefused
from tests import factories
from tests.e2e.conftest import Stack, _running
from tests.e2e.test_a2a_loop import (
    ask_refund,
    decide_in_browser,
    ledger,
    pushes_received,
    task_state,
    wait_for,
)
from tests.examples.harness import AgentClient

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def listing_stack(transactional_db, tmp_path, monkeypatch):
    """The stack with a worker that lists parked tasks every second, and an agent that never POSTs its
    requests to Reviewer (the subprocesses inherit this environment)."""
    monkeypatch.setenv("PARKED_TASKS_LIST_SECONDS", "1")
    monkeypatch.setenv("REFUND_AGENT_NO_REST_INTAKE", "1")
    # Its requests name its registration (factories.make_agent's slug): ListTasks adopts only those.
    monkeypatch.setenv("REFUND_AGENT_AGENT_SLUG", "refund-demo")
    yield from _running(Stack(tmp_path))


def registered(stack):
    tenant = factories.make_tenant()
    factories.make_user("requester", tenant=tenant, principal_id="requester", groups=["finance"])
    reviewer = factories.make_user("reviewer_a", tenant=tenant, groups=["finance"], first_name="Alice")
    admin = factories.make_user("admin", tenant=tenant, role="admin", groups=["admins"])
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 1}]
    )
    factories.make_agent(
        tenant, push_token=stack.push_token, api_token="agent-api-token", card_url=stack.agent.audience
    )
    return tenant, reviewer, admin


def park_without_push(stack, text: str) -> str:
    """Send the agent a refund request with no push config at all; returns the parked task's id."""

    async def run():
        agent = await AgentClient.connect(stack.agent.url)
        try:
            message = Message(
                message_id=str(uuid.uuid4()),
                role=Role.ROLE_USER,
                parts=[Part(text=text)],
                metadata={"principal": {"id": "requester", "display": "Rita Requester"}},
            )
            request = SendMessageRequest(
                message=message, configuration=SendMessageConfiguration(return_immediately=True)
            )
            replies = [r async for r in agent.client.send_message(request)]
            task, _ = await agent.wait_parked(replies[-1].task.id)
            return task.id
        finally:
            await agent.close()

    return asyncio.run(run())


def rest_intakes(stack) -> list[str]:
    lines = stack.access_log.read_text().splitlines() if stack.access_log.exists() else []
    return [line for line in lines if "POST /api/v1/proposals" in line]


def test_a_task_parked_without_push_or_rest_call_is_found_by_listing_and_approved(listing_stack):
    stack = listing_stack
    tenant, reviewer, _ = registered(stack)

    task_id = park_without_push(stack, "Please refund EUR 40.00 for order 1182 (the parcel never arrived)")

    proposal = wait_for(
        lambda: Proposal.objects.filter(task_id=task_id).first(), "the worker to list the parked task", stack
    )
    submitted = AuditEvent.objects.get(verb=Verb.PROPOSAL_SUBMITTED, subject=f"proposal:{proposal.id}")
    assert submitted.data["via"] == "list_tasks"
    assert pushes_received(stack) == [] and rest_intakes(stack) == []  # no other way it could have come

    decide_in_browser(stack, reviewer, proposal, "approve")

    wait_for(lambda: Proposal.objects.get(pk=proposal.pk).state == State.SUCCEEDED, "succeeded", stack)
    (refund,) = ledger(stack)
    assert refund["idempotency_key"] == str(Decision.objects.get(proposal=proposal).jti)
    assert task_state(stack, task_id) == "TASK_STATE_COMPLETED"
    # Listed again every second since: still one proposal for the task.
    assert Proposal.objects.filter(task_id=task_id).count() == 1


def test_a_halt_cancels_a_task_still_parked_for_review_at_the_agent(stack):
    tenant, reviewer, admin = registered(stack)
    task_id = ask_refund(stack, "Refund EUR 75.50 for order 1211 (duplicate charge)")
    proposal = wait_for(lambda: Proposal.objects.filter(task_id=task_id).first(), "the proposal", stack)

    halt(scope=Halt.Scope.TENANT, actor=admin, reason="runaway agent", tenant=tenant)

    assert task_state(stack, task_id) == "TASK_STATE_CANCELED"
    assert Proposal.objects.get(pk=proposal.pk).state == State.CANCELLED
    resume(actor=admin, tenant=tenant)
    with pytest.raises(VoteRefused) as refused:  # resuming brings nothing back
        cast_vote(
            proposal.id,
            reviewer,
            verdict="approve",
            digest_seen=proposal.action_digest,
            step_up=step_up_for(reviewer, factories.totp_code(reviewer)),
        )
    assert "cancelled at" in refused.value.message and "halt: runaway agent" in refused.value.message
    assert ledger(stack) == []
