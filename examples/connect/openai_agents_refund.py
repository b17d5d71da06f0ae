"""OpenAI Agents SDK: the SDK's tool approval hook, decided by Reviewer.

    REVIEWER_API_TOKEN=... python -m examples.connect.openai_agents_refund --audience urn:agent:openai-demo

`ScriptedModel` stands in for the model (so the example runs without network or an API key): it calls
`refund` once and then repeats the tool's answer. Pass `model="gpt-..."` to `build_agent` for a real one.
"""

import asyncio

from agents import Agent, ModelResponse, Usage, function_tool, set_tracing_disabled
from agents.models.interface import Model
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from examples.connect.common import Ledger, client_from, parse_settings

# reviewer: begin
from reviewer_gate import current_approval
from reviewer_gate.describe import ToolDescription
from reviewer_gate.openai_agents import ReviewerApprovals

# reviewer: end

# How the refund reads for the reviewers (see examples/connect/langgraph_refund.py); the principal comes
# from the run's context (`Runner.run(..., context=...)`) when it names one.
# reviewer: begin description
REFUND = ToolDescription(
    name="payments.refund",
    summary="Refund {currency} {amount} for order {order_id}",
    consequences="Money goes back to the customer's card",
    currency="EUR",
    reversible=False,
    principal=lambda context: (context or {}).get("principal") or {"id": "requester", "display": "Rita"},
)
# reviewer: end


class ScriptedModel(Model):
    """Calls refund(order_id, amount) once, then answers with the tool's output."""

    def __init__(self, order_id: str, amount: str):
        self.arguments = f'{{"order_id": "{order_id}", "amount": "{amount}"}}'

    async def get_response(self, system_instructions, input, *args, **kwargs):  # noqa: A002 - the SDK's name
        outputs = [i for i in input if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if not outputs:
            call = ResponseFunctionToolCall(
                type="function_call",
                call_id="call-refund",
                name="refund",
                arguments=self.arguments,
                id="fc-1",
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        text = ResponseOutputText(type="output_text", text=str(outputs[-1]["output"]), annotations=[])
        message = ResponseOutputMessage(
            type="message", id="m-1", role="assistant", status="completed", content=[text]
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("the example does not stream")


# reviewer: begin
def build_agent(approvals: ReviewerApprovals, ledger: Ledger, model) -> Agent:
    # reviewer: end
    @function_tool
    def refund(order_id: str, amount: str) -> str:
        """Refund an order."""
        # reviewer: begin
        transaction_id = ledger.refund(order_id, amount, idempotency_key=current_approval().idempotency_key)
        # reviewer: end
        return f"refunded EUR {amount} for order {order_id}: {transaction_id}"

    return Agent(
        name="refunds",
        instructions="Refund what you are asked to.",
        model=model,
        # reviewer: begin
        tools=[approvals.gate(refund, REFUND)],
        # reviewer: end
    )


# reviewer: begin
async def run(approvals: ReviewerApprovals, ledger: Ledger, order_id: str, amount: str) -> str:
    # reviewer: end
    # reviewer: begin
    agent = build_agent(approvals, ledger, ScriptedModel(order_id, amount))
    # reviewer: end
    # reviewer: begin
    result = await approvals.run(agent, f"Refund EUR {amount} for order {order_id}")
    # reviewer: end
    return str(result.final_output)


if __name__ == "__main__":
    set_tracing_disabled(True)
    settings = parse_settings("python -m examples.connect.openai_agents_refund", __doc__.splitlines()[0])
    # reviewer: begin
    approvals = ReviewerApprovals(
        client_from(settings), principal={"id": "requester", "display": "Rita Requester"}
    )
    # reviewer: end
    # reviewer: begin
    print(asyncio.run(run(approvals, Ledger(settings.ledger), settings.order, settings.amount)))
    # reviewer: end
