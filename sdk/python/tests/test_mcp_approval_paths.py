"""How an MCP client sees a gated call's approval (reviewer_gate/mcp_approval.py), with the official `mcp`
client in process against the gateway: URL elicitation inside an `input_required` answer (protocol
2026-07-28), `elicitation/create` in URL mode (2025-11-25, mode="legacy"), progress notifications for a
client without elicitation, and nothing to show when policy decided at intake. The fake Reviewer
decides from another thread."""

import json

import mcp_types as types
import pytest

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402
from mcp.server.mcpserver import MCPServer  # noqa: E402

from reviewer_gate import ReviewerClient, testing  # noqa: E402
from reviewer_gate.describe import ToolDescription  # noqa: E402
from reviewer_gate.mcp_approval import APPROVAL_PATH_META, ELICITATION_KEY  # noqa: E402
from reviewer_gate.mcp_gateway import MCPGateway, load_descriptions  # noqa: E402
from reviewer_gate.risk import GatingRules  # noqa: E402

AUDIENCE = "urn:agent:mcp-gateway"
ARGUMENTS = {"order_id": "7002", "amount": "22.00"}


def payments_server(calls: list):
    server = MCPServer("payments")

    @server.tool()
    def refund(order_id: str, amount: str) -> str:
        """Refund an order to the customer's card."""
        calls.append((order_id, amount))
        return f"refunded {amount} for {order_id}"

    return server


@pytest.fixture
def calls():
    return []


@pytest.fixture
def gateway(reviewer, calls):
    client = ReviewerClient(
        reviewer_url=reviewer.url, api_token="gw-token", audience=AUDIENCE, poll_seconds=1
    )
    descriptions = {"refund": ToolDescription(name="payments.refund", currency="EUR", reversible=False)}
    return MCPGateway(
        payments_server(calls),
        client,
        rules=GatingRules.of(gated=["refund"], open=[]),
        upstream_name="payments",
        descriptions=descriptions,
        decision_timeout=20,
    )


class Elicitations:
    """The client's elicitation handler: records what it was shown, answers `action`, and (as the
    reviewer would, once the user opened the page) lets the fake Reviewer decide."""

    def __init__(self, reviewer, key, action="accept", **decision):
        self.reviewer, self.key, self.action, self.decision = reviewer, key, action, decision
        self.shown = []

    async def __call__(self, context, params):
        self.shown.append(params)
        if self.action == "accept":
            testing.decide_next_proposal(self.reviewer, self.key, audience=AUDIENCE, seen=0, **self.decision)
        return types.ElicitResult(action=self.action)


def path_of(result) -> str:
    return (result.meta or {}).get(APPROVAL_PATH_META)


def text(result) -> str:
    return " ".join(block.text for block in result.content)


async def test_a_2026_client_with_url_elicitation_gets_the_page_inside_input_required(
    gateway, reviewer, key, calls
):
    elicitations = Elicitations(reviewer, key)
    async with Client(gateway.server, elicitation_callback=elicitations) as client:
        result = await client.call_tool("refund", ARGUMENTS)

    assert not result.is_error and text(result) == "refunded 22.00 for 7002"
    assert path_of(result) == "input-required"
    (shown,) = elicitations.shown
    proposal_id = reviewer.proposal_id_of(reviewer.proposals[0]["body"]["task_id"])
    assert shown.mode == "url" and shown.url == f"{reviewer.url}/proposals/{proposal_id}/"
    assert "refund on payments" in shown.message
    assert calls == [("7002", "22.00")] and len(reviewer.proposals) == 1


async def test_a_2025_client_with_url_elicitation_gets_elicitation_create(gateway, reviewer, key, calls):
    elicitations = Elicitations(reviewer, key)
    async with Client(gateway.server, mode="legacy", elicitation_callback=elicitations) as client:
        result = await client.call_tool("refund", ARGUMENTS)

    assert not result.is_error and path_of(result) == "url-elicitation"
    (shown,) = elicitations.shown
    assert shown.url.startswith(f"{reviewer.url}/proposals/")
    assert calls == [("7002", "22.00")]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_declined_elicitation_runs_nothing(gateway, reviewer, key, calls, mode):
    elicitations = Elicitations(reviewer, key, action="decline")
    async with Client(gateway.server, mode=mode, elicitation_callback=elicitations) as client:
        result = await client.call_tool("refund", ARGUMENTS)
    assert result.is_error and "declined" in text(result)
    assert calls == [] and reviewer.consumes == []


async def test_a_client_without_elicitation_waits_with_progress(gateway, reviewer, key, calls):
    testing.decide_next_proposal(reviewer, key, audience=AUDIENCE, seen=0)
    async with Client(gateway.server) as client:
        result = await client.call_tool("refund", ARGUMENTS)
    assert not result.is_error and path_of(result) == "progress"
    assert calls == [("7002", "22.00")]


async def test_a_call_policy_decided_at_intake_shows_nothing_and_runs(gateway, reviewer, key, calls):
    testing.decide_at_intake(reviewer, key, audience=AUDIENCE)
    elicitations = Elicitations(reviewer, key)
    async with Client(gateway.server, elicitation_callback=elicitations) as client:
        result = await client.call_tool("refund", ARGUMENTS)
    assert path_of(result) == "intake" and elicitations.shown == [] and reviewer.pulls == []
    assert calls == [("7002", "22.00")]


async def test_the_proposal_names_the_server_the_tool_the_client_and_the_target(gateway, reviewer, key):
    testing.decide_at_intake(reviewer, key, audience=AUDIENCE)
    async with Client(gateway.server) as client:
        await client.call_tool("refund", ARGUMENTS)
    request = reviewer.proposals[0]["body"]["request"]
    assert request["action"] == {"tool": "payments.refund", "arguments": ARGUMENTS, "target": "order_id:7002"}
    assert request["summary"] == "Refund an order to the customer's card: order_id 7002, amount EUR 22.00"
    assert request["principal"] == {"id": "mcp-client:mcp", "display": "mcp 0.1.0"}  # the client's clientInfo
    consequences = request["consequences"]
    assert consequences["mcp_server"] == "payments" and consequences["effect"] == "calls refund on payments"
    assert consequences["tool_description"] == "Refund an order to the customer's card."
    assert (consequences["currency"], consequences["reversible"]) == ("EUR", False)


async def test_a_malformed_or_replayed_retry_is_refused_and_runs_nothing(gateway, reviewer, key, calls):
    async with Client(
        gateway.server, elicitation_callback=Elicitations(reviewer, key, action="cancel")
    ) as client:
        first = await client.session.call_tool("refund", ARGUMENTS, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult) and ELICITATION_KEY in first.input_requests
        state = first.request_state
        no_answer = await client.session.call_tool(
            "refund", ARGUMENTS, request_state=state, input_responses={}
        )
        replayed = await client.session.call_tool(
            "refund",
            ARGUMENTS,
            request_state=state,
            input_responses={ELICITATION_KEY: types.ElicitResult(action="accept")},
        )
        forged = await client.session.call_tool(
            "refund",
            ARGUMENTS,
            request_state="made-up",
            input_responses={ELICITATION_KEY: types.ElicitResult(action="accept")},
        )
    assert no_answer.is_error and "no answer to the elicitation" in text(no_answer)
    assert replayed.is_error and "unknown or was already used" in text(replayed)  # single use
    assert forged.is_error and "unknown or was already used" in text(forged)
    assert calls == [] and reviewer.consumes == []


async def test_a_retry_with_other_arguments_is_refused(gateway, reviewer, key, calls):
    async with Client(
        gateway.server, elicitation_callback=Elicitations(reviewer, key, action="cancel")
    ) as client:
        first = await client.session.call_tool("refund", ARGUMENTS, allow_input_required=True)
        changed = await client.session.call_tool(
            "refund",
            {**ARGUMENTS, "amount": "2200.00"},
            request_state=first.request_state,
            input_responses={ELICITATION_KEY: types.ElicitResult(action="accept")},
        )
    assert changed.is_error and "other arguments" in text(changed)
    assert calls == []


def test_a_descriptions_file_with_an_unknown_field_is_refused_by_name(tmp_path):
    path = tmp_path / "describe.json"
    path.write_text(json.dumps({"refund": {"name": "payments.refund", "amount_field": "amount"}}))
    with pytest.raises(ValueError, match="amount_field"):
        load_descriptions(str(path))
    path.write_text(json.dumps({"refund": {"name": "payments.refund", "currency": "EUR"}}))
    assert load_descriptions(str(path))["refund"].name == "payments.refund"
