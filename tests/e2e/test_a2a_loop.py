"""The whole loop over real HTTP: the demo refund agent (a2a-sdk, its own process) parks a refund and
pushes it to Reviewer (Daphne); a reviewer signs in with password and a real TOTP code and decides in
the browser's forms; the worker continues the agent's task with the signed decision; the agent verifies
it, consumes it, refunds once (its ledger), and the outcome comes back. Nothing is mocked."""

import asyncio
import json
import uuid

import httpx
import pytest
from a2a.types import (
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskPushNotificationConfig,
    TaskState,
)

from approvals.models import Decision, OutboxMessage, Proposal
from approvals.states import State
from audit.chain.verification import verify_chain
from audit.models import AuditEvent, Verb
from tests import factories
from tests.examples.harness import AgentClient
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DEADLINE_SECONDS = 30


def wait_for(check, what: str, stack):
    """wait_until with the stack's timeout, and its server logs when the wait fails."""
    return wait_until(check, what, timeout=DEADLINE_SECONDS, interval=0.1, detail=stack.logs)


def ask_refund(stack, text: str) -> str:
    """What a customer-operations tool does: send the request with Reviewer's webhook as the task's push
    config, then wait until the agent parked the task (or ended it: a policy decided at intake). Returns
    the task id."""

    async def run():
        agent = await AgentClient.connect(stack.agent.url)
        try:
            message = Message(
                message_id=str(uuid.uuid4()),
                role=Role.ROLE_USER,
                parts=[Part(text=text)],
                metadata={"principal": {"id": "requester", "display": "Rita Requester"}},
            )
            configuration = SendMessageConfiguration(
                return_immediately=True,
                task_push_notification_config=TaskPushNotificationConfig(
                    url=stack.webhook, token=stack.push_token
                ),
            )
            replies = [
                r
                async for r in agent.client.send_message(
                    SendMessageRequest(message=message, configuration=configuration)
                )
            ]
            task = await agent.wait_asked(replies[-1].task.id)
            return task.id
        finally:
            await agent.close()

    return asyncio.run(run())


def task_state(stack, task_id: str) -> str:
    async def run():
        agent = await AgentClient.connect(stack.agent.url)
        try:
            return TaskState.Name((await agent.wait_terminal(task_id)).status.state)
        finally:
            await agent.close()

    return asyncio.run(run())


def decide_in_browser(stack, user, proposal: Proposal, action: str, reason: str = "") -> None:
    """Sign in with password and a one-time code, then press Approve or Reject with a fresh code."""
    with httpx.Client(base_url=stack.url, timeout=10) as browser:
        browser.get("/accounts/login/")
        signed_in = browser.post(
            "/accounts/login/",
            data={
                "csrfmiddlewaretoken": browser.cookies["csrftoken"],
                "username": user.username,
                "password": factories.PASSWORD,
                "otp_token": factories.totp_code(user),
            },
        )
        assert signed_in.status_code == 302, signed_in.text[:2000]
        page = browser.get(f"/proposals/{proposal.id}/")
        assert page.status_code == 200
        assert proposal.action_digest in page.text  # the form carries the digest the reviewer was shown
        decided = browser.post(
            f"/proposals/{proposal.id}/decide",
            data={
                "csrfmiddlewaretoken": browser.cookies["csrftoken"],
                "action": action,
                "digest": proposal.action_digest,
                "reason": reason,
                "otp_code": factories.totp_code(user),
            },
        )
        assert decided.status_code == 302, decided.text[:2000]


def pushes_received(stack) -> list[str]:
    if not stack.access_log.exists():
        return []
    return [line for line in stack.access_log.read_text().splitlines() if "/a2a/push/refund-demo/" in line]


def ledger(stack) -> list[dict]:
    path = stack.agent.state_dir / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def registered(stack):
    """The tenant, its people and policy, and the refund agent registered with the stack's tokens."""
    tenant = factories.make_tenant()
    factories.make_user("requester", tenant=tenant, principal_id="requester", groups=["finance"])
    reviewer = factories.make_user("reviewer_a", tenant=tenant, groups=["finance"], first_name="Alice")
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 1}]
    )
    factories.make_agent(
        tenant, push_token=stack.push_token, api_token="agent-api-token", card_url=stack.agent.audience
    )
    return tenant, reviewer


def test_an_approved_refund_is_executed_exactly_once(stack, registered):
    tenant, reviewer = registered

    task_id = ask_refund(stack, "Please refund EUR 40.00 for order 1182 (the parcel never arrived)")
    proposal = wait_for(lambda: Proposal.objects.filter(task_id=task_id).first(), "the proposal", stack=stack)
    wait_for(lambda: pushes_received(stack), "the agent's push to /a2a/push/refund-demo/", stack=stack)
    assert proposal.state == State.AWAITING_REVIEW
    assert proposal.action["arguments"] == {"order_id": "1182", "amount": "40.00", "currency": "EUR"}

    decide_in_browser(stack, reviewer, proposal, "approve")

    wait_for(lambda: Proposal.objects.get(pk=proposal.pk).state == State.SUCCEEDED, "succeeded", stack=stack)
    decision = Decision.objects.get(proposal=proposal)
    (refund,) = ledger(stack)  # one line: the refund happened once
    assert refund["idempotency_key"] == str(decision.jti)
    assert Proposal.objects.get(pk=proposal.pk).transaction_id == refund["transaction_id"]
    assert task_state(stack, task_id) == "TASK_STATE_COMPLETED"
    assert OutboxMessage.objects.get(proposal=proposal).status == OutboxMessage.Status.DELIVERED
    assert (
        AuditEvent.objects.filter(verb=Verb.DECISION_CONSUMED, subject=f"proposal:{proposal.id}").count() == 1
    )
    result = verify_chain(f"tenant:{tenant.id}")
    assert result.ok, result


def test_a_rejected_refund_is_never_executed(stack, registered):
    tenant, reviewer = registered

    task_id = ask_refund(stack, "Refund EUR 75.50 for order 1211 (duplicate charge)")
    proposal = wait_for(lambda: Proposal.objects.filter(task_id=task_id).first(), "the proposal", stack=stack)

    decide_in_browser(stack, reviewer, proposal, "reject", reason="the charge was not duplicated")

    assert task_state(stack, task_id) == "TASK_STATE_REJECTED"
    wait_for(
        lambda: OutboxMessage.objects.get(proposal=proposal).status == OutboxMessage.Status.DELIVERED,
        "the rejection delivered",
        stack=stack,
    )
    assert Proposal.objects.get(pk=proposal.pk).state == State.REJECTED
    assert ledger(stack) == []
    assert not AuditEvent.objects.filter(verb=Verb.DECISION_CONSUMED).exists()
    result = verify_chain(f"tenant:{tenant.id}")
    assert result.ok, result
