"""The "Connect your agent" examples against a running Reviewer (Daphne + worker): plain REST,
LangGraph, the OpenAI Agents SDK, Microsoft Agent Framework, Google ADK and CrewAI, each pulling its
decision, and the A2A server, continued by Reviewer's worker. A pulling
example runs in a thread (it blocks while it waits), the A2A server in its own process; a reviewer
votes in the browser forms with a TOTP code, the example verifies, consumes, refunds once into its
ledger with the decision id as key, and reports."""

import asyncio
import os
import subprocess
import sys
import threading
import uuid

import httpx
import pytest
from a2a.types import Message, Part, Role, SendMessageRequest, Task, TaskState
from agents import set_tracing_disabled

from approvals.models import Decision, OutboxMessage, Proposal
from approvals.services.agents import register_agent
from approvals.states import State
from examples.connect import (
    adk_refund,
    agent_framework_refund,
    crewai_refund,
    langgraph_refund,
    openai_agents_refund,
    rest_refund,
)
from examples.connect.common import Ledger
from reviewer_gate import ReviewerClient, adk, agent_framework
from reviewer_gate.crewai import ReviewerTools
from reviewer_gate.openai_agents import ReviewerApprovals
from tests import factories
from tests.e2e.test_a2a_loop import decide_in_browser, wait_for
from tests.examples.harness import (
    CHECKOUT_PYTHONPATH,
    REPO,
    AgentClient,
    approval_request_of,
    free_port,
    status_text,
    stop_process,
)
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

AUDIENCE = "urn:agent:connect-demo"
API_TOKEN = "connect-demo-token"
set_tracing_disabled(True)  # the Agents SDK would try to export traces to OpenAI


@pytest.fixture
def tenant(reviewer_stack):
    return factories.make_tenant()


@pytest.fixture
def reviewer_user(tenant):
    reviewer = factories.make_user("reviewer_a", tenant=tenant, groups=["finance"], first_name="Alice")
    factories.make_policy(
        tenant, "everything", tool_pattern="*", thresholds=[{"group": "finance", "count": 1}]
    )
    register_agent(
        tenant=tenant,
        slug="connect-demo",
        name="Connect demo",
        card_url="",  # a pull agent: no A2A server, Reviewer never calls it
        audience=AUDIENCE,
        push_token="unused",
        api_token=API_TOKEN,
    )
    return reviewer


@pytest.fixture
def client(reviewer_stack):
    return ReviewerClient(
        reviewer_url=reviewer_stack.url, api_token=API_TOKEN, audience=AUDIENCE, poll_seconds=5
    )


class Background(threading.Thread):
    def __init__(self, work):
        super().__init__(daemon=True)
        self.work, self.value, self.error = work, None, None

    def run(self):
        try:
            self.value = self.work()
        except BaseException as error:  # re-raised by result()
            self.error = error

    def result(self, timeout: float = 60):
        self.join(timeout)
        assert not self.is_alive(), "the example did not finish"
        if self.error:
            raise self.error
        return self.value


def approve_the_proposal(stack, reviewer, verdict="approve", reason=""):
    proposal = wait_for(lambda: Proposal.objects.first(), "the example's proposal", stack=stack)
    decide_in_browser(stack, reviewer, proposal, verdict, reason=reason)
    return proposal


def assert_refunded_once(stack, proposal, ledger):
    wait_for(lambda: Proposal.objects.get(pk=proposal.pk).state == State.SUCCEEDED, "succeeded", stack=stack)
    (entry,) = ledger.entries()
    assert entry["idempotency_key"] == str(Decision.objects.get(proposal=proposal).jti)


def test_plain_rest(reviewer_stack, reviewer_user, client, tmp_path):
    ledger = Ledger(tmp_path / "refunds.jsonl")
    run = Background(lambda: rest_refund.refund_with_approval(client, ledger, "1182", "40.00"))
    run.start()
    proposal = approve_the_proposal(reviewer_stack, reviewer_user)
    assert run.result().startswith("refunded EUR 40.00 for order 1182")
    assert_refunded_once(reviewer_stack, proposal, ledger)


def test_plain_rest_rejected(reviewer_stack, reviewer_user, client, tmp_path):
    ledger = Ledger(tmp_path / "refunds.jsonl")
    run = Background(lambda: rest_refund.refund_with_approval(client, ledger, "1182", "40.00"))
    run.start()
    approve_the_proposal(reviewer_stack, reviewer_user, "reject", reason="already refunded")
    assert run.result() == "not refunded (rejected): already refunded"
    assert ledger.entries() == []


def test_langgraph(reviewer_stack, reviewer_user, client, tmp_path):
    ledger = Ledger(tmp_path / "refunds.jsonl")
    run = Background(lambda: langgraph_refund.run(client, ledger, "1182", "40.00"))
    run.start()
    proposal = approve_the_proposal(reviewer_stack, reviewer_user)
    assert "order 1182: delivered" in run.result()
    assert proposal.action == {
        "tool": "payments.refund",  # the example's ToolDescription: what a payments.* policy matches
        "arguments": {"order_id": "1182", "amount": "40.00"},
        "target": "order_id:1182",
    }
    assert proposal.summary == "Refund EUR 40.00 for order 1182"
    assert proposal.consequences["currency"] == "EUR" and proposal.reversibility == "R3"
    assert_refunded_once(reviewer_stack, proposal, ledger)


def test_openai_agents(reviewer_stack, reviewer_user, client, tmp_path):
    ledger = Ledger(tmp_path / "refunds.jsonl")
    approvals = ReviewerApprovals(client, principal={"id": "requester", "display": "Rita"})
    run = Background(lambda: asyncio.run(openai_agents_refund.run(approvals, ledger, "1182", "40.00")))
    run.start()
    proposal = approve_the_proposal(reviewer_stack, reviewer_user)
    assert run.result().startswith("refunded EUR 40.00 for order 1182")
    assert (proposal.tool, proposal.summary) == ("payments.refund", "Refund EUR 40.00 for order 1182")
    assert_refunded_once(reviewer_stack, proposal, ledger)


def test_agent_framework(reviewer_stack, reviewer_user, client, tmp_path):
    ledger = Ledger(tmp_path / "refunds.jsonl")
    approvals = agent_framework.ReviewerApprovals(client, principal={"id": "requester", "display": "Rita"})
    run = Background(lambda: asyncio.run(agent_framework_refund.run(approvals, ledger, "1182", "40.00")))
    run.start()
    proposal = approve_the_proposal(reviewer_stack, reviewer_user)
    assert run.result().startswith("refunded EUR 40.00 for order 1182")
    assert (proposal.tool, proposal.summary) == ("payments.refund", "Refund EUR 40.00 for order 1182")
    assert_refunded_once(reviewer_stack, proposal, ledger)


def test_adk(reviewer_stack, reviewer_user, client, tmp_path):
    ledger = Ledger(tmp_path / "refunds.jsonl")
    approvals = adk.ReviewerConfirmations(client, principal={"id": "requester", "display": "Rita"})
    run = Background(lambda: asyncio.run(adk_refund.run(approvals, ledger, "1182", "40.00")))
    run.start()
    proposal = approve_the_proposal(reviewer_stack, reviewer_user)
    assert run.result().startswith("refunded EUR 40.00 for order 1182")
    assert (proposal.tool, proposal.summary) == ("payments.refund", "Refund EUR 40.00 for order 1182")
    assert_refunded_once(reviewer_stack, proposal, ledger)


@pytest.fixture
def crewai_offline(monkeypatch):
    # The example turns CrewAI's telemetry off; this also skips its first-run prompt to show traces.
    monkeypatch.setenv("CREWAI_TESTING", "true")


def test_crewai(reviewer_stack, reviewer_user, client, tmp_path, crewai_offline):
    ledger = Ledger(tmp_path / "refunds.jsonl")
    approvals = ReviewerTools(client, principal={"id": "requester", "display": "Rita"})
    run = Background(lambda: crewai_refund.run(approvals, ledger, "1182", "40.00"))
    run.start()
    proposal = approve_the_proposal(reviewer_stack, reviewer_user)
    assert run.result().startswith("refunded EUR 40.00 for order 1182")
    assert (proposal.tool, proposal.summary) == ("payments.refund", "Refund EUR 40.00 for order 1182")
    assert_refunded_once(reviewer_stack, proposal, ledger)


def test_crewai_rejected(reviewer_stack, reviewer_user, client, tmp_path, crewai_offline):
    ledger = Ledger(tmp_path / "refunds.jsonl")
    approvals = ReviewerTools(client, principal={"id": "requester", "display": "Rita"})
    run = Background(lambda: crewai_refund.run(approvals, ledger, "1182", "40.00"))
    run.start()
    approve_the_proposal(reviewer_stack, reviewer_user, "reject", reason="already refunded")
    assert run.result() == "Rejected by the reviewer: already refunded. Nothing was run."
    assert ledger.entries() == []


@pytest.fixture
def a2a_agent(reviewer_stack, tenant, tmp_path):
    """examples/connect/a2a_refund.py as its docstring runs it: registered with its card URL in the
    test's tenant, then its own process on a loopback port. Yields its URL and its ledger."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    card_url = f"{url}/.well-known/agent-card.json"
    register_agent(
        tenant=tenant,
        slug="a2a-demo",
        name="A2A demo",
        card_url=card_url,  # Reviewer continues the agent's tasks there; the audience defaults to it
        push_token="a2a-demo-push",
        api_token="a2a-demo-token",
    )
    ledger = Ledger(tmp_path / "a2a-refunds.jsonl")
    log = tmp_path / "a2a-agent.log"
    args = [sys.executable, "-m", "examples.connect.a2a_refund", "--port", str(port)]
    args += ["--reviewer-url", reviewer_stack.url, "--audience", card_url, "--ledger", str(ledger.path)]
    args += ["--tenant", tenant.slug, "--agent-slug", "a2a-demo"]
    env = {**os.environ, "PYTHONPATH": CHECKOUT_PYTHONPATH, "REVIEWER_API_TOKEN": "a2a-demo-token"}
    with log.open("ab") as output:
        process = subprocess.Popen(args, cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT)

    def card_served() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"the agent exited with {process.returncode}:\n{log.read_text()}")
        try:
            return httpx.get(card_url, timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(card_served, "the A2A example's card", timeout=30, interval=0.1, detail=log.read_text)
        yield url, ledger
    finally:
        stop_process(process)
        sys.stdout.write(f"--- A2A example\n{log.read_text()}")  # shown by pytest only for a failing test


def ask_a2a_agent(url: str, text: str) -> Task:
    """What a user does: SendMessage with the a2a-sdk client, which answers once the task is parked."""

    async def send() -> Task:
        agent = await AgentClient.connect(url)
        try:
            message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
            replies = [
                reply async for reply in agent.client.send_message(SendMessageRequest(message=message))
            ]
            return replies[-1].task
        finally:
            await agent.close()

    return asyncio.run(send())


def a2a_task_ended(url: str, task_id: str) -> Task:
    async def wait() -> Task:
        agent = await AgentClient.connect(url)
        try:
            return await agent.wait_terminal(task_id)
        finally:
            await agent.close()

    return asyncio.run(wait())


def test_a2a_server(reviewer_stack, reviewer_user, a2a_agent):
    url, ledger = a2a_agent
    task = ask_a2a_agent(url, "Please refund EUR 40.00 for order 1182")
    assert task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED, status_text(task)
    request = approval_request_of(task)
    assert request is not None and request["summary"] == "Refund EUR 40.00 for order 1182"

    proposal = approve_the_proposal(reviewer_stack, reviewer_user)
    assert (proposal.task_id, proposal.agent.slug) == (task.id, "a2a-demo")
    assert proposal.action["arguments"] == {"order_id": "1182", "amount": "40.00", "currency": "EUR"}

    ended = a2a_task_ended(url, task.id)  # Reviewer's worker continued it with the signed decision
    assert ended.status.state == TaskState.TASK_STATE_COMPLETED, status_text(ended)
    assert status_text(ended).startswith("refunded EUR 40.00 for order 1182: tx-")
    assert_refunded_once(reviewer_stack, proposal, ledger)
    wait_for(
        lambda: OutboxMessage.objects.get(proposal=proposal).status == OutboxMessage.Status.DELIVERED,
        "the continuation marked delivered",
        stack=reviewer_stack,
    )


def test_a2a_server_rejected(reviewer_stack, reviewer_user, a2a_agent):
    url, ledger = a2a_agent
    task = ask_a2a_agent(url, "Please refund EUR 40.00 for order 1182")
    proposal = approve_the_proposal(reviewer_stack, reviewer_user, "reject", reason="already refunded")

    ended = a2a_task_ended(url, task.id)
    assert ended.status.state == TaskState.TASK_STATE_REJECTED
    assert status_text(ended).endswith("already refunded")
    assert Proposal.objects.get(pk=proposal.pk).state == State.REJECTED
    assert ledger.entries() == []
