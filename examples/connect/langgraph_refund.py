"""LangGraph: a graph whose refund tool pauses on `interrupt()` until Reviewer decides.

    REVIEWER_API_TOKEN=... python -m examples.connect.langgraph_refund --audience urn:agent:langgraph-demo

The planner node stands in for a model (deterministic, so the example runs without one): it asks for
an order lookup and a refund, then stops. Put a chat model there in a real graph.
"""

import uuid

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph

from examples.connect.common import Ledger, client_from, parse_settings

# reviewer: begin
from reviewer_gate import ReviewerClient, current_approval
from reviewer_gate.describe import ToolDescription
from reviewer_gate.langgraph import ReviewedToolNode, pending_approvals, resume_with_decisions

# reviewer: end

# How the refund reads for the reviewers: the tool name a `payments.*` policy matches, a summary with the
# currency, what it does and that it cannot be undone, and the person the run acts for.
# reviewer: begin description
REFUND = ToolDescription(
    name="payments.refund",
    summary="Refund {currency} {amount} for order {order_id}",
    consequences="Money goes back to the customer's card",
    target="order_id",
    currency="EUR",
    reversible=False,
    principal=lambda config: {
        "id": config["configurable"].get("user_id", "requester"),
        "display": config["configurable"].get("user_name", "Rita Requester"),
    },
)
# reviewer: end


# reviewer: begin
def build_graph(client: ReviewerClient, ledger: Ledger, order_id: str, amount: str):
    # reviewer: end
    @tool
    def refund(order_id: str, amount: str) -> str:
        """Refund an order (the side effect: gated)."""
        # reviewer: begin
        return ledger.refund(order_id, amount, idempotency_key=current_approval().idempotency_key)
        # reviewer: end

    @tool
    def lookup_order(order_id: str) -> str:
        """Look an order up (read-only: not gated)."""
        return f"order {order_id}: delivered 3 days ago"

    def planner(state: MessagesState):
        if isinstance(state["messages"][-1], ToolMessage):
            return {
                "messages": [
                    AIMessage("; ".join(m.content for m in state["messages"] if isinstance(m, ToolMessage)))
                ]
            }
        calls = [
            {"name": "lookup_order", "args": {"order_id": order_id}, "id": f"lookup-{order_id}"},
            {"name": "refund", "args": {"order_id": order_id, "amount": amount}, "id": f"refund-{order_id}"},
        ]
        return {"messages": [AIMessage("", tool_calls=calls)]}

    builder = StateGraph(MessagesState)
    builder.add_node("planner", planner)
    # reviewer: begin
    node = ReviewedToolNode([refund, lookup_order], client, gated=["refund"], descriptions={"refund": REFUND})
    # reviewer: end
    builder.add_node("tools", node)
    builder.add_edge(START, "planner")
    builder.add_conditional_edges(
        "planner", lambda s: "tools" if s["messages"][-1].tool_calls else END, ["tools", END]
    )
    builder.add_edge("tools", "planner")
    return builder.compile(checkpointer=InMemorySaver())  # a durable checkpointer in production


# reviewer: begin
def run(client: ReviewerClient, ledger: Ledger, order_id: str, amount: str) -> str:
    # reviewer: end
    # reviewer: begin
    graph = build_graph(client, ledger, order_id, amount)
    # reviewer: end
    config = {"configurable": {"thread_id": str(uuid.uuid4())}}
    state = graph.invoke({"messages": [HumanMessage(f"Refund EUR {amount} for order {order_id}")]}, config)
    # reviewer: begin
    while pending_approvals(graph, config):
        state = resume_with_decisions(graph, config, client)  # waits for Reviewer, then resumes
    # reviewer: end
    return state["messages"][-1].content


if __name__ == "__main__":
    settings = parse_settings("python -m examples.connect.langgraph_refund", __doc__.splitlines()[0])
    # reviewer: begin
    print(run(client_from(settings), Ledger(settings.ledger), settings.order, settings.amount))
    # reviewer: end
