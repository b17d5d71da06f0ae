"""reviewer_gate.langgraph with a real LangGraph graph and checkpointer, driven without any model: a
deterministic node emits the tool call, ReviewedToolNode pauses the graph with interrupt(), the fake
Reviewer decides, resume_with_decisions resumes it."""

import uuid

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.types import Command  # noqa: E402

from reviewer_gate import ReviewerClient, gate  # noqa: E402
from reviewer_gate.describe import ToolDescription, ToolDescriptionError  # noqa: E402
from reviewer_gate.langgraph import ReviewedToolNode, pending_approvals, resume_with_decisions  # noqa: E402
from reviewer_gate.testing import ReviewerKey, decide_at_intake, decision_claims  # noqa: E402

AUDIENCE = "urn:agent:langgraph"


@pytest.fixture
def client(reviewer):
    return ReviewerClient(reviewer_url=reviewer.url, api_token="lg-token", audience=AUDIENCE, poll_seconds=1)


@pytest.fixture
def refunds():
    return []


@pytest.fixture
def graph(client, refunds):
    @tool
    def refund(order_id: str, amount: str) -> str:
        """Refund an order."""
        refunds.append((order_id, amount))
        return f"refunded {amount} for {order_id}"

    @tool
    def lookup_order(order_id: str) -> str:
        """Look an order up."""
        return f"order {order_id}: delivered"

    def planner(state: MessagesState):
        """Stands in for the model: asks for one lookup and one refund, then stops."""
        if isinstance(state["messages"][-1], ToolMessage):
            return {"messages": [AIMessage("done")]}
        calls = [
            {"name": "lookup_order", "args": {"order_id": "1182"}, "id": "call-lookup"},
            {"name": "refund", "args": {"order_id": "1182", "amount": "40.00"}, "id": "call-refund"},
        ]
        return {"messages": [AIMessage("", tool_calls=calls)]}

    builder = StateGraph(MessagesState)
    builder.add_node("planner", planner)
    builder.add_node("tools", ReviewedToolNode([refund, lookup_order], client, gated=["refund"]))
    builder.add_edge(START, "planner")
    builder.add_conditional_edges(
        "planner", lambda state: "tools" if state["messages"][-1].tool_calls else END, ["tools", END]
    )
    builder.add_edge("tools", "planner")
    return builder.compile(checkpointer=InMemorySaver())


def config():
    return {"configurable": {"thread_id": str(uuid.uuid4())}}


def sign_for_last_proposal(reviewer, key, *, decision="approved", **overrides):
    body = reviewer.proposals[-1]["body"]
    claims = {
        "task_id": body["task_id"],
        "request_id": body["request"]["request_id"],
        "action_digest": body["request"]["action_digest"],
        "context_id": body["context_id"],
        "decision": decision,
    }
    token = key.sign(decision_claims(issuer=reviewer.url, audience=AUDIENCE, **{**claims, **overrides}))
    reviewer.decide(reviewer.proposal_id_of(body["task_id"]), token)
    return token


def tool_messages(state) -> dict:
    return {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}


def test_a_gated_call_pauses_the_graph_and_runs_once_after_approval(graph, client, reviewer, key, refunds):
    cfg = config()
    graph.invoke({"messages": [HumanMessage("refund order 1182")]}, cfg)

    (pending,) = pending_approvals(graph, cfg)
    assert pending["action"] == {
        "tool": "refund",
        "arguments": {"order_id": "1182", "amount": "40.00"},
        "target": "order_id:1182",  # by default, from the arguments that name what a call acts on
    }
    assert refunds == []  # paused before the side effect
    assert len(reviewer.proposals) == 1

    sign_for_last_proposal(reviewer, key)
    state = resume_with_decisions(graph, cfg, client)

    assert refunds == [("1182", "40.00")]
    messages = tool_messages(state)
    assert messages["call-refund"].content == "refunded 40.00 for 1182"
    assert messages["call-lookup"].content == "order 1182: delivered"
    assert state["messages"][-1].content == "done"
    jti = messages["call-refund"].artifact["decision_id"]
    assert reviewer.consumes_for(jti) and reviewer.outcomes_for(jti) == ["succeeded"]
    # the node re-ran on resume and submitted the same request again: still one proposal
    assert len({p["body"]["request"]["request_id"] for p in reviewer.proposals}) == 1


def test_a_rejection_becomes_the_tools_answer_and_nothing_runs(graph, client, reviewer, key, refunds):
    cfg = config()
    graph.invoke({"messages": [HumanMessage("refund")]}, cfg)
    sign_for_last_proposal(reviewer, key, decision="rejected", reason="parcel was delivered")
    state = resume_with_decisions(graph, cfg, client)
    message = tool_messages(state)["call-refund"]
    assert message.status == "error" and "parcel was delivered" in message.content
    assert refunds == []


def test_a_reviewers_edit_runs_the_edited_arguments(graph, client, reviewer, key, refunds):
    cfg = config()
    graph.invoke({"messages": [HumanMessage("refund")]}, cfg)
    body = reviewer.proposals[-1]["body"]
    edited = {"tool": "refund", "arguments": {"order_id": "1182", "amount": "25.00"}}
    sign_for_last_proposal(
        reviewer,
        key,
        request_id=body["request"]["request_id"] + ".edit",
        replaces=[body["request"]["request_id"]],
        action=edited,
        action_digest=gate.action_digest(edited),
    )
    state = resume_with_decisions(graph, cfg, client)
    assert refunds == [("1182", "25.00")]
    assert tool_messages(state)["call-refund"].artifact["edited"] is True


def test_an_expired_proposal_resumes_with_a_refusal(graph, client, reviewer, refunds):
    cfg = config()
    graph.invoke({"messages": [HumanMessage("refund")]}, cfg)
    reviewer.close(reviewer.proposal_id_of(reviewer.proposals[-1]["body"]["task_id"]), "expired")
    state = resume_with_decisions(graph, cfg, client)
    assert "expired" in tool_messages(state)["call-refund"].content
    assert refunds == []


def test_a_forged_resume_value_is_refused_by_the_gate(graph, reviewer, refunds):
    cfg = config()
    graph.invoke({"messages": [HumanMessage("refund")]}, cfg)
    body = reviewer.proposals[-1]["body"]
    forged = ReviewerKey().sign(
        decision_claims(
            issuer=reviewer.url,
            audience=AUDIENCE,
            task_id=body["task_id"],
            request_id=body["request"]["request_id"],
            action_digest=body["request"]["action_digest"],
            context_id=body["context_id"],
        )
    )
    (interruption,) = graph.get_state(cfg).interrupts
    state = graph.invoke(Command(resume={interruption.id: {"token": forged}}), cfg)
    assert "unknown_kid" in tool_messages(state)["call-refund"].content
    assert refunds == []


def described_graph(client, refunds, descriptions):
    @tool
    def refund(order_id: str, amount: str) -> str:
        """Refund an order to the customer's card.

        Irreversible once the bank has it."""
        refunds.append((order_id, amount))
        return f"refunded {amount} for {order_id}"

    def planner(state: MessagesState):
        if isinstance(state["messages"][-1], ToolMessage):
            return {"messages": [AIMessage("done")]}
        call = {"name": "refund", "args": {"order_id": "7002", "amount": "22.00"}, "id": "call-refund"}
        return {"messages": [AIMessage("", tool_calls=[call])]}

    builder = StateGraph(MessagesState)
    builder.add_node("planner", planner)
    builder.add_node("tools", ReviewedToolNode([refund], client, gated=["refund"], descriptions=descriptions))
    builder.add_edge(START, "planner")
    builder.add_conditional_edges(
        "planner", lambda state: "tools" if state["messages"][-1].tool_calls else END, ["tools", END]
    )
    builder.add_edge("tools", "planner")
    return builder.compile(checkpointer=InMemorySaver())


REFUND = ToolDescription(
    name="payments.refund",
    summary="Refund {currency} {amount} for order {order_id}",
    consequences="Money goes back to the customer's card",
    currency="EUR",
    reversible=False,
    principal=lambda config: {"id": config["configurable"]["user_id"], "display": "Casey Customer"},
)


def test_a_described_tool_reads_like_a_request_from_the_a2a_agent(client, reviewer, refunds):
    graph = described_graph(client, refunds, {"refund": REFUND})
    cfg = {"configurable": {"thread_id": str(uuid.uuid4()), "user_id": "u-7"}}
    graph.invoke({"messages": [HumanMessage("refund order 7002")]}, cfg)

    request = reviewer.proposals[-1]["body"]["request"]
    assert request["summary"] == "Refund EUR 22.00 for order 7002"
    assert request["action"] == {
        "tool": "payments.refund",  # what a payments.* policy matches
        "arguments": {"order_id": "7002", "amount": "22.00"},
        "target": "order_id:7002",
    }
    assert request["principal"] == {"id": "u-7", "display": "Casey Customer"}
    consequences = request["consequences"]
    assert consequences["effect"] == "Money goes back to the customer's card"
    assert (consequences["amount"], consequences["currency"], consequences["reversible"]) == (
        "22.00",
        "EUR",
        False,
    )
    assert consequences["tool"] == "refund"


def test_without_a_description_the_defaults_come_from_the_tools_own_text_and_schema(
    client, reviewer, refunds
):
    graph = described_graph(client, refunds, None)
    graph.invoke({"messages": [HumanMessage("refund")]}, config())
    request = reviewer.proposals[-1]["body"]["request"]
    assert request["summary"] == "Refund an order to the customer's card: order_id 7002, amount 22.00"
    assert request["action"]["target"] == "order_id:7002"
    assert request["consequences"]["tool_description"].startswith("Refund an order to the customer's card.")


def test_a_described_call_allowed_by_policy_at_intake_runs_without_pausing(client, reviewer, key, refunds):
    decide_at_intake(reviewer, key, audience=AUDIENCE)
    graph = described_graph(client, refunds, {"refund": REFUND})
    cfg = {"configurable": {"thread_id": str(uuid.uuid4()), "user_id": "u-7"}}
    state = graph.invoke({"messages": [HumanMessage("refund")]}, cfg)

    assert pending_approvals(graph, cfg) == [] and refunds == [("7002", "22.00")]
    assert reviewer.pulls == []
    assert state["messages"][-1].content == "done"


@pytest.mark.parametrize(
    ("description", "field"),
    [
        (ToolDescription(summary="Refund {amount} to {iban}"), "summary"),
        (ToolDescription(summary="x" * 501), "summary"),
        (ToolDescription(target="iban"), "target"),
        (ToolDescription(currency="euro"), "currency"),
        (ToolDescription(name=""), "name"),
    ],
)
def test_a_description_that_cannot_work_is_refused_when_the_node_is_built(
    client, refunds, description, field
):
    with pytest.raises(ToolDescriptionError) as refused:
        described_graph(client, refunds, {"refund": description})
    assert refused.value.field == field


def test_a_description_for_a_tool_the_node_does_not_run_is_refused(client, refunds):
    with pytest.raises(ValueError, match="lookup"):
        described_graph(client, refunds, {"lookup": ToolDescription()})


# Parallel tool calls: one batch, one pause, each member its own decision.


@pytest.fixture
def parallel_graph(client, refunds):
    @tool
    def refund(order_id: str, amount: str) -> str:
        """Refund an order."""
        refunds.append((order_id, amount))
        return f"refunded {amount} for {order_id}"

    @tool
    def lookup_order(order_id: str) -> str:
        """Look an order up."""
        return f"order {order_id}: delivered"

    def planner(state: MessagesState):
        """Stands in for a model that asks for three refunds and a lookup in one message."""
        if isinstance(state["messages"][-1], ToolMessage):
            return {"messages": [AIMessage("done")]}
        calls = [
            {"name": "refund", "args": {"order_id": "1182", "amount": "40.00"}, "id": "call-a"},
            {"name": "lookup_order", "args": {"order_id": "1182"}, "id": "call-lookup"},
            {"name": "refund", "args": {"order_id": "1183", "amount": "15.00"}, "id": "call-b"},
            {"name": "refund", "args": {"order_id": "1184", "amount": "25.00"}, "id": "call-c"},
        ]
        return {"messages": [AIMessage("", tool_calls=calls)]}

    builder = StateGraph(MessagesState)
    builder.add_node("planner", planner)
    builder.add_node("tools", ReviewedToolNode([refund, lookup_order], client, gated=["refund"]))
    builder.add_edge(START, "planner")
    builder.add_conditional_edges(
        "planner", lambda state: "tools" if state["messages"][-1].tool_calls else END, ["tools", END]
    )
    builder.add_edge("tools", "planner")
    return builder.compile(checkpointer=InMemorySaver())


def sign_member(reviewer, key, member: dict, *, decision="approved", **overrides) -> None:
    """Sign one batch member's decision, bound to its own request, naming the batch's manifest."""
    (batch,) = {call["body"]["batch_id"]: call["body"] for call in reviewer.batches}.values()
    request = next(m for m in batch["members"] if m["action"] == member["action"])
    claims = {
        "task_id": batch["task_id"],
        "request_id": request["request_id"],
        "action_digest": request["action_digest"],
        "context_id": batch["context_id"],
        "decision": decision,
        "manifest": batch["manifest_digest"],
    }
    token = key.sign(decision_claims(issuer=reviewer.url, audience=AUDIENCE, **{**claims, **overrides}))
    reviewer.decide(member["proposal_id"], token)


def test_parallel_gated_calls_are_one_batch_one_pause_and_each_runs_once(
    parallel_graph, client, reviewer, key, refunds
):
    cfg = config()
    parallel_graph.invoke({"messages": [HumanMessage("refund the three orders")]}, cfg)

    (pending,) = pending_approvals(parallel_graph, cfg)  # one pause for the three
    assert [m["tool_call_id"] for m in pending["members"]] == ["call-a", "call-b", "call-c"]
    assert len(reviewer.batches) == 1 and refunds == []  # asked once, nothing run, not even the lookup
    members = reviewer.batches[0]["body"]["members"]
    assert [m["action"]["arguments"]["order_id"] for m in members] == ["1182", "1183", "1184"]

    sign_member(reviewer, key, pending["members"][0])
    sign_member(reviewer, key, pending["members"][1], decision="rejected", reason="already refunded")
    sign_member(reviewer, key, pending["members"][2])
    state = resume_with_decisions(parallel_graph, cfg, client)

    assert refunds == [("1182", "40.00"), ("1184", "25.00")]  # each approved member once, in order
    messages = tool_messages(state)
    assert messages["call-lookup"].content == "order 1182: delivered"
    assert messages["call-b"].status == "error" and "already refunded" in messages["call-b"].content
    for call_id in ("call-a", "call-c"):
        jti = messages[call_id].artifact["decision_id"]
        assert len(reviewer.consumes_for(jti)) == 1 and reviewer.outcomes_for(jti) == ["succeeded"]
    # the node re-ran on resume and submitted the same batch again: still three proposals
    assert len({(p["body"]["task_id"], p["body"]["request"]["request_id"]) for p in reviewer.proposals}) == 3
    assert len({call["body"]["batch_id"] for call in reviewer.batches}) == 1


def test_a_batch_decided_at_intake_runs_every_member_without_pausing(parallel_graph, reviewer, key, refunds):
    decide_at_intake(reviewer, key, audience=AUDIENCE)
    cfg = config()
    parallel_graph.invoke({"messages": [HumanMessage("refund the three orders")]}, cfg)

    assert pending_approvals(parallel_graph, cfg) == []
    assert refunds == [("1182", "40.00"), ("1183", "15.00"), ("1184", "25.00")]


def test_calls_reviewer_will_not_batch_are_asked_about_one_by_one_with_one_pause(
    parallel_graph, client, reviewer, key, refunds
):
    reviewer.batch_refusal = ("not_batchable", "no policy allows batching refund")
    cfg = config()
    parallel_graph.invoke({"messages": [HumanMessage("refund the three orders")]}, cfg)

    (pending,) = pending_approvals(parallel_graph, cfg)
    assert len(pending["members"]) == 3 and len(reviewer.proposals) == 3  # three proposals, one pause
    for call in reviewer.proposals:
        body = call["body"]
        claims = {
            "task_id": body["task_id"],
            "request_id": body["request"]["request_id"],
            "action_digest": body["request"]["action_digest"],
            "context_id": body["context_id"],
            "decision": "approved",
        }
        token = key.sign(decision_claims(issuer=reviewer.url, audience=AUDIENCE, **claims))
        reviewer.decide(reviewer.proposal_id_for(body["task_id"], body["request"]["request_id"]), token)
    state = resume_with_decisions(parallel_graph, cfg, client)

    assert pending_approvals(parallel_graph, cfg) == []
    assert refunds == [("1182", "40.00"), ("1183", "15.00"), ("1184", "25.00")]  # each once
    assert all(m.status != "error" for m in tool_messages(state).values())


def test_a_batch_refused_for_a_wrong_manifest_is_an_error_not_a_fallback(parallel_graph, reviewer, refunds):
    reviewer.batch_refusal = ("manifest_mismatch", "the manifest digest is not the members'")

    with pytest.raises(ValueError, match="manifest_mismatch"):
        parallel_graph.invoke({"messages": [HumanMessage("refund")]}, config())
    assert refunds == [] and reviewer.proposals == []
