"""CrewAI: a crew whose refund tool runs only on Reviewer's approval.

    REVIEWER_API_TOKEN=... python -m examples.connect.crewai_refund --audience urn:agent:crewai-demo

`ScriptedLLM` stands in for the model (so the example runs without network or an API key): it calls
`refund` once and then answers with what the tool said. Give the `Agent` a model name (`llm="gpt-..."`,
or any CrewAI LLM) for a real one.
"""

import os

# CrewAI reports installs and runs to its servers unless told not to; the example runs offline.
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")

from crewai import Agent, BaseLLM, Crew, Task  # noqa: E402 - after the telemetry switch

from examples.connect.common import Ledger, client_from, parse_settings  # noqa: E402

# reviewer: begin
from reviewer_gate import current_approval  # noqa: E402
from reviewer_gate.crewai import ReviewerTools  # noqa: E402
from reviewer_gate.describe import ToolDescription  # noqa: E402

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


class ScriptedLLM(BaseLLM):
    """Calls refund(order_id, amount) once (CrewAI's ReAct text), then answers with the tool's output."""

    def __init__(self, order_id: str, amount: str):
        super().__init__(model="scripted")
        self.order_id, self.amount = order_id, amount

    def call(self, messages, *args, **kwargs):
        last = messages[-1]["content"] if isinstance(messages, list) else messages
        if "Observation:" in last:
            return f"Thought: done\nFinal Answer: {last.rsplit('Observation:', 1)[1].strip()}"
        arguments = f'{{"order_id": "{self.order_id}", "amount": "{self.amount}"}}'
        return f"Thought: refund it\nAction: refund\nAction Input: {arguments}"

    def supports_function_calling(self):
        return False  # CrewAI then asks in ReAct text, which the script writes


# reviewer: begin
def build_crew(approvals: ReviewerTools, ledger: Ledger, llm, order_id: str, amount: str) -> Crew:
    # reviewer: end
    def refund(order_id: str, amount: str) -> str:
        """Refund an order."""
        # reviewer: begin
        transaction_id = ledger.refund(order_id, amount, idempotency_key=current_approval().idempotency_key)
        # reviewer: end
        return f"refunded EUR {amount} for order {order_id}: {transaction_id}"

    agent = Agent(
        role="Refunds clerk",
        goal="Refund what you are asked to.",
        backstory="You refund orders for customers.",
        llm=llm,
        # reviewer: begin
        tools=[approvals.gate(refund, REFUND)],
        # reviewer: end
    )
    task = Task(
        description=f"Refund EUR {amount} for order {order_id}.",
        expected_output="What the refund tool answered.",
        agent=agent,
    )
    return Crew(agents=[agent], tasks=[task])


# reviewer: begin
def run(approvals: ReviewerTools, ledger: Ledger, order_id: str, amount: str) -> str:
    # reviewer: end
    # reviewer: begin
    crew = build_crew(approvals, ledger, ScriptedLLM(order_id, amount), order_id, amount)
    # reviewer: end
    return str(crew.kickoff().raw)


if __name__ == "__main__":
    settings = parse_settings("python -m examples.connect.crewai_refund", __doc__.splitlines()[0])
    # reviewer: begin
    approvals = ReviewerTools(
        client_from(settings), principal={"id": "requester", "display": "Rita Requester"}
    )
    # reviewer: end
    # reviewer: begin
    print(run(approvals, Ledger(settings.ledger), settings.order, settings.amount))
    # reviewer: end
