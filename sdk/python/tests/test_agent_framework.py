"""reviewer_gate.agent_framework with Microsoft Agent Framework's own run loop (Agent.run, its function
approval requests and sessions) and a scripted chat client (no network, no real model); the fake
Reviewer decides."""

import json

import pytest

pytest.importorskip("agent_framework")

from agent_framework import (  # noqa: E402
    Agent,
    BaseChatClient,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
    Message,
    tool,
)

from reviewer_gate import ReviewerClient  # noqa: E402
from reviewer_gate.agent_framework import ReviewerApprovals  # noqa: E402
from reviewer_gate.describe import ToolDescription, ToolDescriptionError  # noqa: E402
from reviewer_gate.testing import decide_at_intake, decide_next_proposal  # noqa: E402

AUDIENCE = "urn:agent:agent-framework"


class ScriptedChatClient(FunctionInvocationLayer, BaseChatClient):
    """Calls `refund` once, then answers with what the model last read (the tool's output, or the
    reviewer's reason beside a rejection) as its final text."""

    def _inner_get_response(self, *, messages, stream, options, **kwargs):
        async def answer():
            last = messages[-1]
            if last.role == "user" and not any(c.type == "function_result" for c in last.contents):
                if len(messages) == 1:
                    arguments = json.dumps({"order_id": "1182", "amount": "40.00"})
                    call = Content.from_function_call(call_id="call-1", name="refund", arguments=arguments)
                    return ChatResponse(messages=[Message(role="assistant", contents=[call])])
            read = [str(c.result) for m in messages for c in m.contents if c.type == "function_result"]
            read += [c.text for m in messages if m.role == "user" for c in m.contents if c.type == "text"][1:]
            return ChatResponse(messages=[Message(role="assistant", contents=[" | ".join(read)])])

        return answer()


@pytest.fixture
def refunds():
    return []


@pytest.fixture
def approvals(reviewer):
    client = ReviewerClient(
        reviewer_url=reviewer.url, api_token="af-token", audience=AUDIENCE, poll_seconds=1
    )
    return ReviewerApprovals(client, principal={"id": "u-7", "display": "Casey"}, decision_timeout=20)


def refund_tool(refunds):
    @tool
    def refund(order_id: str, amount: str) -> str:
        """Refund an order."""
        refunds.append((order_id, amount))
        return f"refunded {amount} for {order_id}"

    return refund


@pytest.fixture
def agent(approvals, refunds):
    return Agent(client=ScriptedChatClient(), tools=[approvals.gate(refund_tool(refunds))])


def decide_when_submitted(reviewer, key, **options):
    return decide_next_proposal(reviewer, key, audience=AUDIENCE, **{"seen": 0, **options})  # the first


async def test_an_approved_call_runs_once_through_the_frameworks_approval_request(
    approvals, agent, reviewer, key, refunds
):
    decide_when_submitted(reviewer, key)
    response = await approvals.run(agent, "refund order 1182")
    assert response.text == "refunded 40.00 for 1182"
    assert refunds == [("1182", "40.00")]
    (proposal,) = reviewer.proposals
    assert proposal["body"]["request"]["action"] == {
        "tool": "refund",
        "arguments": {"order_id": "1182", "amount": "40.00"},
        "target": "order_id:1182",
    }
    assert proposal["body"]["task_id"] == "agent-framework-call-1"
    (consume,) = reviewer.consumes
    assert reviewer.outcomes_for(consume["jti"]) == ["succeeded"]


async def test_a_rejection_is_what_the_model_reads_and_nothing_runs(approvals, agent, reviewer, key, refunds):
    decide_when_submitted(reviewer, key, decision="rejected", reason="the parcel was delivered")
    response = await approvals.run(agent, "refund order 1182")
    assert "Rejected by the reviewer: the parcel was delivered" in response.text
    assert refunds == [] and reviewer.consumes == []


async def test_an_expired_proposal_is_rejected_and_nothing_runs(approvals, agent, reviewer, key, refunds):
    decide_when_submitted(reviewer, key, close="expired")
    response = await approvals.run(agent, "refund order 1182")
    assert "expired" in response.text
    assert refunds == []


async def test_a_reviewers_edit_runs_the_edited_arguments(approvals, agent, reviewer, key, refunds):
    edited = {"tool": "refund", "arguments": {"order_id": "1182", "amount": "25.00"}}
    decide_next_proposal(reviewer, key, audience=AUDIENCE, edit=edited)
    response = await approvals.run(agent, "refund order 1182")
    assert refunds == [("1182", "25.00")]
    assert response.text == "refunded 25.00 for 1182"


async def test_approving_by_hand_does_not_run_a_gated_tool(agent, refunds):
    session = agent.create_session()
    paused = await agent.run("refund order 1182", session=session)
    (request,) = paused.user_input_requests
    answer = Message(role="user", contents=[request.to_function_approval_response(approved=True)])
    resumed = await agent.run(answer, session=session)  # the framework's own approval, without Reviewer
    assert "not approved by Reviewer" in resumed.text
    assert refunds == []


async def test_a_described_tool_names_the_policy_tool_the_currency_and_the_runs_principal(
    approvals, reviewer, key, refunds
):
    description = ToolDescription(
        name="payments.refund",
        summary="Refund {currency} {amount} for order {order_id}",
        currency="EUR",
        reversible=False,
        principal=lambda context: {"id": context["user_id"], "display": context["user_name"]},
    )
    decide_at_intake(reviewer, key, audience=AUDIENCE)  # a payments.* policy allows it
    agent = Agent(client=ScriptedChatClient(), tools=[approvals.gate(refund_tool(refunds), description)])

    context = {"user_id": "u-9", "user_name": "Dana"}
    response = await approvals.run(agent, "refund order 1182", context=context)

    request = reviewer.proposals[-1]["body"]["request"]
    assert request["summary"] == "Refund EUR 40.00 for order 1182"
    assert request["action"]["tool"] == "payments.refund"
    assert request["principal"] == {"id": "u-9", "display": "Dana"}
    assert response.text == "refunded 40.00 for 1182" and refunds == [("1182", "40.00")]
    assert reviewer.pulls == []  # the intake answer carried the decision


def test_a_description_naming_an_argument_the_tool_lacks_is_refused_at_gate(approvals, refunds):
    with pytest.raises(ToolDescriptionError) as refused:
        approvals.gate(refund_tool(refunds), ToolDescription(summary="Refund to {iban}"))
    assert refused.value.field == "summary"
