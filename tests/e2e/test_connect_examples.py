"""The "Connect your agent" examples against a running Reviewer (Daphne + worker): plain REST,
LangGraph, the OpenAI Agents SDK, Microsoft Agent Framework, Google ADK and CrewAI, each pulling its
decision. The
example runs in a thread (it blocks while it waits), a reviewer votes in the browser forms with a
TOTP code, the example verifies, consumes, refunds once into its ledger with the decision id as key,
and reports."""

import asyncio
import threading

import pytest
from agents import set_tracing_disabled

from approvals.models import Decision, Proposal
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

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

AUDIENCE = "urn:agent:connect-demo"
API_TOKEN = "connect-demo-token"
set_tracing_disabled(True)  # the Agents SDK would try to export traces to OpenAI


@pytest.fixture
def reviewer_user(reviewer_stack):
    tenant = factories.make_tenant()
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
