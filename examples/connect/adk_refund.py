"""Google ADK: the agent's tool confirmation, decided by Reviewer.

    REVIEWER_API_TOKEN=... python -m examples.connect.adk_refund --audience urn:agent:adk-demo

`ScriptedModel` stands in for the model (so the example runs without network or an API key): it calls
`refund` once and then repeats what the tool answered. Give the `LlmAgent` a Gemini model name (or any
ADK model) for a real one.
"""

import asyncio

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from examples.connect.common import Ledger, client_from, parse_settings

# reviewer: begin
from reviewer_gate import current_approval
from reviewer_gate.adk import ReviewerConfirmations
from reviewer_gate.describe import ToolDescription

# reviewer: end

# How the refund reads for the reviewers (see examples/connect/langgraph_refund.py).
# reviewer: begin description
REFUND = ToolDescription(
    name="payments.refund",
    summary="Refund {currency} {amount} for order {order_id}",
    consequences="Money goes back to the customer's card",
    currency="EUR",
    reversible=False,
)
# reviewer: end


class ScriptedModel(BaseLlm):
    """Calls refund(order_id, amount) once, then answers with what the tool said."""

    model: str = "scripted"
    order_id: str
    amount: str

    async def generate_content_async(self, llm_request, stream=False):
        results = [
            p.function_response.response for p in llm_request.contents[-1].parts if p.function_response
        ]
        if results:
            answer = results[-1]
            text = str(answer.get("result", answer.get("error", answer)))
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))
            return
        call = types.FunctionCall(
            id="call-refund", name="refund", args={"order_id": self.order_id, "amount": self.amount}
        )
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))


# reviewer: begin
def build_agent(approvals: ReviewerConfirmations, ledger: Ledger, model) -> LlmAgent:
    # reviewer: end
    def refund(order_id: str, amount: str) -> str:
        """Refund an order."""
        # reviewer: begin
        transaction_id = ledger.refund(order_id, amount, idempotency_key=current_approval().idempotency_key)
        # reviewer: end
        return f"refunded EUR {amount} for order {order_id}: {transaction_id}"

    # reviewer: begin
    return LlmAgent(name="refunds", model=model, tools=[approvals.gate(refund, REFUND)])
    # reviewer: end


# reviewer: begin
async def run(approvals: ReviewerConfirmations, ledger: Ledger, order_id: str, amount: str) -> str:
    # reviewer: end
    sessions = InMemorySessionService()
    # reviewer: begin
    agent = build_agent(approvals, ledger, ScriptedModel(order_id=order_id, amount=amount))
    # reviewer: end
    runner = Runner(app_name="refunds", agent=agent, session_service=sessions)
    session = await sessions.create_session(app_name="refunds", user_id="requester")
    asked = types.Content(role="user", parts=[types.Part(text=f"Refund EUR {amount} for order {order_id}")])
    # reviewer: begin
    events = await approvals.run(runner, user_id="requester", session_id=session.id, new_message=asked)
    # reviewer: end
    return [
        part.text for event in events if event.content for part in event.content.parts or [] if part.text
    ][-1]


if __name__ == "__main__":
    settings = parse_settings("python -m examples.connect.adk_refund", __doc__.splitlines()[0])
    # reviewer: begin
    approvals = ReviewerConfirmations(
        client_from(settings), principal={"id": "requester", "display": "Rita Requester"}
    )
    # reviewer: end
    # reviewer: begin
    print(asyncio.run(run(approvals, Ledger(settings.ledger), settings.order, settings.amount)))
    # reviewer: end
