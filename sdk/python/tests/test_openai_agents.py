"""reviewer_gate.openai_agents with the Agents SDK's own run loop (Runner.run, its approval
interruptions and RunState) and a scripted Model (no network, no real model); the fake Reviewer decides."""

import threading

import pytest

pytest.importorskip("agents")

from agents import Agent, ModelResponse, Runner, Usage, function_tool, set_tracing_disabled  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from openai.types.responses import (  # noqa: E402
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from reviewer_gate import ReviewerClient  # noqa: E402
from reviewer_gate.describe import ToolDescription, ToolDescriptionError  # noqa: E402
from reviewer_gate.openai_agents import ReviewerApprovals  # noqa: E402
from reviewer_gate.testing import (  # noqa: E402
    decide_at_intake,
    decide_next_proposal,
    decision_claims,
)

AUDIENCE = "urn:agent:openai-agents"
set_tracing_disabled(True)  # no trace export: these tests never touch the network


class ScriptedModel(Model):
    """Calls `refund` once, then answers with the tool's output (or the rejection) as its final text."""

    def __init__(self, arguments='{"order_id": "1182", "amount": "40.00"}'):
        self.arguments = arguments
        self.inputs = []

    async def get_response(self, system_instructions, input, *args, **kwargs):  # noqa: A002
        self.inputs.append(input)
        outputs = [
            item for item in input if isinstance(item, dict) and item.get("type") == "function_call_output"
        ]
        if not outputs:
            call = ResponseFunctionToolCall(
                type="function_call", call_id="call-1", name="refund", arguments=self.arguments, id="fc-1"
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        text = ResponseOutputText(type="output_text", text=str(outputs[-1]["output"]), annotations=[])
        message = ResponseOutputMessage(
            type="message", id="msg-1", role="assistant", status="completed", content=[text]
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("not used")


@pytest.fixture
def refunds():
    return []


@pytest.fixture
def approvals(reviewer):
    client = ReviewerClient(
        reviewer_url=reviewer.url, api_token="oa-token", audience=AUDIENCE, poll_seconds=1
    )
    return ReviewerApprovals(client, principal={"id": "u-7", "display": "Casey"}, decision_timeout=20)


@pytest.fixture
def agent(approvals, refunds):
    @function_tool
    def refund(order_id: str, amount: str) -> str:
        """Refund an order."""
        refunds.append((order_id, amount))
        return f"refunded {amount} for {order_id}"

    return Agent(
        name="ops", instructions="refund things", model=ScriptedModel(), tools=[approvals.gate(refund)]
    )


def decide_when_submitted(reviewer, key, **options):
    return decide_next_proposal(reviewer, key, audience=AUDIENCE, **{"seen": 0, **options})  # the first


async def test_an_approved_call_runs_once_through_the_sdks_approval_hook(
    approvals, agent, reviewer, key, refunds
):
    decide_when_submitted(reviewer, key)
    result = await approvals.run(agent, "refund order 1182")
    assert result.final_output == "refunded 40.00 for 1182"
    assert refunds == [("1182", "40.00")]
    (proposal,) = reviewer.proposals
    assert proposal["body"]["request"]["action"] == {
        "tool": "refund",
        "arguments": {"order_id": "1182", "amount": "40.00"},
        "target": "order_id:1182",
    }
    assert proposal["body"]["task_id"] == "openai-agents-call-1"
    (consume,) = reviewer.consumes
    assert reviewer.outcomes_for(consume["jti"]) == ["succeeded"]


async def test_a_rejection_is_what_the_model_reads_and_nothing_runs(approvals, agent, reviewer, key, refunds):
    decide_when_submitted(reviewer, key, decision="rejected", reason="the parcel was delivered")
    result = await approvals.run(agent, "refund order 1182")
    assert "the parcel was delivered" in result.final_output
    assert refunds == [] and reviewer.consumes == []


async def test_an_expired_proposal_is_rejected_and_nothing_runs(approvals, agent, reviewer, key, refunds):
    decide_when_submitted(reviewer, key, close="expired")
    result = await approvals.run(agent, "refund order 1182")
    assert "expired" in result.final_output
    assert refunds == []


async def test_a_reviewers_edit_runs_the_edited_arguments(approvals, agent, reviewer, key, refunds):
    edited = {"tool": "refund", "arguments": {"order_id": "1182", "amount": "25.00"}}
    decide_next_proposal(reviewer, key, audience=AUDIENCE, edit=edited)
    result = await approvals.run(agent, "refund order 1182")
    assert refunds == [("1182", "25.00")]
    assert result.final_output == "refunded 25.00 for 1182"


async def test_approving_by_hand_does_not_run_a_gated_tool(agent, refunds):
    result = await Runner.run(agent, "refund order 1182")
    (item,) = result.interruptions
    state = result.to_state()
    state.approve(item)  # the SDK's own approval, without Reviewer
    resumed = await Runner.run(agent, state)
    assert "not approved by Reviewer" in resumed.final_output
    assert refunds == []


def described_agent(approvals, refunds, description):
    @function_tool
    def refund(order_id: str, amount: str) -> str:
        """Refund an order to the customer's card."""
        refunds.append((order_id, amount))
        return f"refunded {amount} for {order_id}"

    return Agent(
        name="ops",
        instructions="refund things",
        model=ScriptedModel(),
        tools=[approvals.gate(refund, description)],
    )


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
    agent = described_agent(approvals, refunds, description)

    result = await approvals.run(agent, "refund order 1182", context={"user_id": "u-9", "user_name": "Dana"})

    request = reviewer.proposals[-1]["body"]["request"]
    assert request["summary"] == "Refund EUR 40.00 for order 1182"
    assert request["action"]["tool"] == "payments.refund"
    assert request["principal"] == {"id": "u-9", "display": "Dana"}
    assert (request["consequences"]["currency"], request["consequences"]["reversible"]) == ("EUR", False)
    assert result.final_output == "refunded 40.00 for 1182" and refunds == [("1182", "40.00")]
    assert reviewer.pulls == []  # the intake answer carried the decision


def test_a_description_naming_an_argument_the_tool_lacks_is_refused_at_gate(approvals, refunds):
    with pytest.raises(ToolDescriptionError) as refused:
        described_agent(approvals, refunds, ToolDescription(summary="Refund to {iban}"))
    assert refused.value.field == "summary"


# Several interruptions of one turn: one batch, each member its own decision.


class ParallelModel(ScriptedModel):
    """Asks for three refunds in one response, then answers with the tools' outputs joined."""

    async def get_response(self, system_instructions, input, *args, **kwargs):  # noqa: A002
        outputs = [
            item for item in input if isinstance(item, dict) and item.get("type") == "function_call_output"
        ]
        if not outputs:
            calls = [
                ResponseFunctionToolCall(
                    type="function_call",
                    call_id=f"call-{order}",
                    name="refund",
                    arguments=f'{{"order_id": "{order}", "amount": "{amount}"}}',
                    id=f"fc-{order}",
                )
                for order, amount in (("1182", "40.00"), ("1183", "15.00"), ("1184", "25.00"))
            ]
            return ModelResponse(output=calls, usage=Usage(), response_id=None)
        text = " | ".join(str(output["output"]) for output in outputs)
        content = [ResponseOutputText(type="output_text", text=text, annotations=[])]
        message = ResponseOutputMessage(
            type="message", id="msg-1", role="assistant", status="completed", content=content
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)


@pytest.fixture
def parallel_agent(approvals, refunds):
    @function_tool
    def refund(order_id: str, amount: str) -> str:
        """Refund an order."""
        refunds.append((order_id, amount))
        return f"refunded {amount} for {order_id}"

    return Agent(name="ops", instructions="refund", model=ParallelModel(), tools=[approvals.gate(refund)])


def decide_each_submitted(reviewer, key, count: int, verdicts: dict[str, str]) -> threading.Thread:
    """A reviewer in another thread: once `count` requests are recorded, signs each one's decision
    (`verdicts[order_id]`, default approved), bound to its own request."""

    def run() -> None:
        while len(reviewer.proposals) < count:
            threading.Event().wait(0.01)  # bounded poll of the fake's record
        for call in reviewer.proposals[:count]:
            body = call["body"]
            request = body["request"]
            claims = {
                "task_id": body["task_id"],
                "request_id": request["request_id"],
                "action_digest": request["action_digest"],
                "context_id": body["context_id"],
                "decision": verdicts.get(request["action"]["arguments"]["order_id"], "approved"),
            }
            if claims["decision"] == "rejected":
                claims["reason"] = "already refunded"
            if reviewer.batches:
                claims["manifest"] = reviewer.batches[0]["body"]["manifest_digest"]
            token = key.sign(decision_claims(issuer=reviewer.url, audience=AUDIENCE, **claims))
            reviewer.decide(reviewer.proposal_id_for(body["task_id"], request["request_id"]), token)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def test_several_interruptions_of_one_turn_are_one_batch_and_each_approved_call_runs_once(
    approvals, parallel_agent, reviewer, key, refunds
):
    decide_each_submitted(reviewer, key, 3, {"1183": "rejected"})
    result = await approvals.run(parallel_agent, "refund the three orders")

    (batch,) = reviewer.batches
    assert [m["action"]["arguments"]["order_id"] for m in batch["body"]["members"]] == [
        "1182",
        "1183",
        "1184",
    ]
    assert len({call["body"]["task_id"] for call in reviewer.proposals}) == 1  # one task, three members
    assert refunds == [("1182", "40.00"), ("1184", "25.00")]
    assert "already refunded" in result.final_output
    assert len(reviewer.consumes) == 2
    for consume in reviewer.consumes:
        assert reviewer.outcomes_for(consume["jti"]) == ["succeeded"]


async def test_interruptions_reviewer_will_not_batch_are_each_their_own_proposal(
    approvals, parallel_agent, reviewer, key, refunds
):
    reviewer.batch_refusal = ("not_batchable", "no policy allows batching refund")
    decide_each_submitted(reviewer, key, 3, {})
    await approvals.run(parallel_agent, "refund the three orders")

    assert sorted(call["body"]["task_id"] for call in reviewer.proposals) == [
        "openai-agents-call-1182",
        "openai-agents-call-1183",
        "openai-agents-call-1184",
    ]
    assert refunds == [("1182", "40.00"), ("1183", "15.00"), ("1184", "25.00")]
    assert len(reviewer.consumes) == 3
