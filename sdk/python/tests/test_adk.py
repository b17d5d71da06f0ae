"""reviewer_gate.adk with Google ADK's own runner (Runner.run_async, its tool confirmation requests and
sessions) and a scripted model (no network, no real model); the fake Reviewer decides."""

import pytest

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.models.base_llm import BaseLlm  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions import InMemorySessionService  # noqa: E402
from google.genai import types  # noqa: E402

from reviewer_gate import ReviewerClient  # noqa: E402
from reviewer_gate.adk import CONFIRMATION_CALL, ReviewerConfirmations  # noqa: E402
from reviewer_gate.describe import ToolDescription, ToolDescriptionError  # noqa: E402
from reviewer_gate.testing import decide_at_intake, decide_next_proposal  # noqa: E402

AUDIENCE = "urn:agent:adk"


class ScriptedModel(BaseLlm):
    """Calls `refund` once, then answers with what it read last: the tool's result, and any text the
    user sent beside a confirmation answer (the reviewer's reason)."""

    model: str = "scripted"

    async def generate_content_async(self, llm_request, stream=False):
        last = llm_request.contents[-1]
        results = [p.function_response.response for p in last.parts if p.function_response]
        if not results:
            call = types.FunctionCall(
                id="call-1", name="refund", args={"order_id": "1182", "amount": "40.00"}
            )
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))
            return
        texts = [p.text for c in llm_request.contents[1:] if c.role == "user" for p in c.parts if p.text]
        read = [str(result.get("result", result)) for result in results] + texts
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=" | ".join(read))]))


@pytest.fixture
def refunds():
    return []


@pytest.fixture
def approvals(reviewer):
    client = ReviewerClient(
        reviewer_url=reviewer.url, api_token="adk-token", audience=AUDIENCE, poll_seconds=1
    )
    return ReviewerConfirmations(client, principal={"id": "u-7", "display": "Casey"}, decision_timeout=20)


def refund_function(refunds):
    def refund(order_id: str, amount: str) -> str:
        """Refund an order."""
        refunds.append((order_id, amount))
        return f"refunded {amount} for {order_id}"

    return refund


class Conversation:
    """One ADK session on an in-memory session service."""

    def __init__(self, tool):
        self.sessions = InMemorySessionService()
        agent = LlmAgent(name="ops", model=ScriptedModel(), tools=[tool])
        self.runner = Runner(app_name="ops", agent=agent, session_service=self.sessions)

    async def start(self):
        self.session = await self.sessions.create_session(app_name="ops", user_id="u-7")
        return self

    @staticmethod
    def said(text):
        return types.Content(role="user", parts=[types.Part(text=text)])

    @staticmethod
    def final_text(events):
        return [p.text for e in events if e.content for p in e.content.parts or [] if p.text][-1]


@pytest.fixture
async def conversation(approvals, refunds):
    return await Conversation(approvals.gate(refund_function(refunds))).start()


async def run(approvals, conversation, **options):
    return await approvals.run(
        conversation.runner,
        user_id="u-7",
        session_id=conversation.session.id,
        new_message=conversation.said("refund order 1182"),
        **options,
    )


def decide_when_submitted(reviewer, key, **options):
    return decide_next_proposal(reviewer, key, audience=AUDIENCE, **{"seen": 0, **options})  # the first


async def test_an_approved_call_runs_once_through_adks_confirmation(
    approvals, conversation, reviewer, key, refunds
):
    decide_when_submitted(reviewer, key)
    events = await run(approvals, conversation)
    assert Conversation.final_text(events) == "refunded 40.00 for 1182"
    assert refunds == [("1182", "40.00")]
    (proposal,) = reviewer.proposals
    assert proposal["body"]["request"]["action"] == {
        "tool": "refund",
        "arguments": {"order_id": "1182", "amount": "40.00"},
        "target": "order_id:1182",
    }
    assert proposal["body"]["task_id"] == "adk-call-1"
    (consume,) = reviewer.consumes
    assert reviewer.outcomes_for(consume["jti"]) == ["succeeded"]


async def test_a_rejection_is_what_the_model_reads_and_nothing_runs(
    approvals, conversation, reviewer, key, refunds
):
    decide_when_submitted(reviewer, key, decision="rejected", reason="the parcel was delivered")
    events = await run(approvals, conversation)
    assert "Rejected by the reviewer: the parcel was delivered" in Conversation.final_text(events)
    assert refunds == [] and reviewer.consumes == []


async def test_a_reviewers_edit_runs_the_edited_arguments(approvals, conversation, reviewer, key, refunds):
    edited = {"tool": "refund", "arguments": {"order_id": "1182", "amount": "25.00"}}
    decide_next_proposal(reviewer, key, audience=AUDIENCE, edit=edited)
    events = await run(approvals, conversation)
    assert refunds == [("1182", "25.00")]
    assert Conversation.final_text(events) == "refunded 25.00 for 1182"


async def test_confirming_by_hand_does_not_run_a_gated_tool(conversation, refunds):
    runner, session_id = conversation.runner, conversation.session.id
    events = [
        e
        async for e in runner.run_async(
            user_id="u-7", session_id=session_id, new_message=conversation.said("go")
        )
    ]
    (confirmation,) = [
        p.function_call
        for e in events
        if e.content
        for p in e.content.parts or []
        if p.function_call and p.function_call.name == CONFIRMATION_CALL
    ]
    answer = types.FunctionResponse(id=confirmation.id, name=CONFIRMATION_CALL, response={"confirmed": True})
    message = types.Content(role="user", parts=[types.Part(function_response=answer)])  # without Reviewer
    resumed = [e async for e in runner.run_async(user_id="u-7", session_id=session_id, new_message=message)]
    assert "not approved by Reviewer" in Conversation.final_text(resumed)
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
    conversation = await Conversation(approvals.gate(refund_function(refunds), description)).start()

    events = await run(approvals, conversation, context={"user_id": "u-9", "user_name": "Dana"})

    request = reviewer.proposals[-1]["body"]["request"]
    assert request["summary"] == "Refund EUR 40.00 for order 1182"
    assert request["action"]["tool"] == "payments.refund"
    assert request["principal"] == {"id": "u-9", "display": "Dana"}
    assert Conversation.final_text(events) == "refunded 40.00 for 1182" and refunds == [("1182", "40.00")]
    assert reviewer.pulls == []  # the intake answer carried the decision


def test_a_description_naming_an_argument_the_function_lacks_is_refused_at_gate(approvals, refunds):
    with pytest.raises(ToolDescriptionError) as refused:
        approvals.gate(refund_function(refunds), ToolDescription(summary="Refund to {iban}"))
    assert refused.value.field == "summary"
