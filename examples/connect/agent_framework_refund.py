"""Microsoft Agent Framework: the framework's function approval requests, decided by Reviewer.

    REVIEWER_API_TOKEN=... python -m examples.connect.agent_framework_refund --audience urn:agent:maf-demo

`ScriptedChatClient` stands in for the model (so the example runs without network or an API key): it
calls `refund` once and then repeats what the tool answered. Pass a real chat client (an
`OpenAIChatClient`, say) to `build_agent` for a real one.
"""

import asyncio
import json

from agent_framework import (
    Agent,
    BaseChatClient,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
    Message,
    tool,
)

from examples.connect.common import Ledger, client_from, parse_settings

# reviewer: begin
from reviewer_gate import current_approval
from reviewer_gate.agent_framework import ReviewerApprovals
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


class ScriptedChatClient(FunctionInvocationLayer, BaseChatClient):
    """Calls refund(order_id, amount) once, then answers with what it read last."""

    def __init__(self, order_id: str, amount: str):
        super().__init__()
        self.arguments = json.dumps({"order_id": order_id, "amount": amount})

    def _inner_get_response(self, *, messages, stream, options, **kwargs):
        async def answer():
            if len(messages) == 1:
                call = Content.from_function_call(
                    call_id="call-refund", name="refund", arguments=self.arguments
                )
                return ChatResponse(messages=[Message(role="assistant", contents=[call])])
            read = [str(c.result) for m in messages for c in m.contents if c.type == "function_result"]
            read += [c.text for m in messages[1:] if m.role == "user" for c in m.contents if c.type == "text"]
            return ChatResponse(messages=[Message(role="assistant", contents=[" | ".join(read)])])

        return answer()


# reviewer: begin
def build_agent(approvals: ReviewerApprovals, ledger: Ledger, chat_client) -> Agent:
    # reviewer: end
    @tool
    def refund(order_id: str, amount: str) -> str:
        """Refund an order."""
        # reviewer: begin
        transaction_id = ledger.refund(order_id, amount, idempotency_key=current_approval().idempotency_key)
        # reviewer: end
        return f"refunded EUR {amount} for order {order_id}: {transaction_id}"

    return Agent(
        client=chat_client,
        instructions="Refund what you are asked to.",
        # reviewer: begin
        tools=[approvals.gate(refund, REFUND)],
        # reviewer: end
    )


# reviewer: begin
async def run(approvals: ReviewerApprovals, ledger: Ledger, order_id: str, amount: str) -> str:
    # reviewer: end
    # reviewer: begin
    agent = build_agent(approvals, ledger, ScriptedChatClient(order_id, amount))
    # reviewer: end
    # reviewer: begin
    response = await approvals.run(agent, f"Refund EUR {amount} for order {order_id}")
    # reviewer: end
    return response.text


if __name__ == "__main__":
    settings = parse_settings("python -m examples.connect.agent_framework_refund", __doc__.splitlines()[0])
    # reviewer: begin
    approvals = ReviewerApprovals(
        client_from(settings), principal={"id": "requester", "display": "Rita Requester"}
    )
    # reviewer: end
    # reviewer: begin
    print(asyncio.run(run(approvals, Ledger(settings.ledger), settings.order, settings.amount)))
    # reviewer: end
