"""reviewer_gate.mcp_gateway with the SDK's own client, in process: client → gateway → an upstream
MCPServer whose side-effecting tool records its calls; the fake Reviewer decides. (tests/e2e in
Reviewer's repository runs the same gateway over stdio and streamable HTTP against a real Reviewer.)"""

import threading

import pytest

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402
from mcp.server.mcpserver import MCPServer  # noqa: E402

from reviewer_gate import (
    ReviewerClient,  # noqa: E402
    testing,
)
from reviewer_gate.mcp_gateway import MCPGateway  # noqa: E402
from reviewer_gate.risk import GatingRules, risk_hint  # noqa: E402
from reviewer_gate.testing import ReviewerKey  # noqa: E402

AUDIENCE = "urn:agent:mcp-gateway"


def upstream_server(calls: list):
    server = MCPServer("files")

    @server.tool()
    def delete_file(path: str) -> str:
        """Delete a file (records the call instead)."""
        calls.append(path)
        return f"deleted {path}"

    @server.tool()
    def read_file(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    return server


@pytest.fixture
def calls():
    return []


@pytest.fixture
def gateway(reviewer, calls):
    client = ReviewerClient(
        reviewer_url=reviewer.url, api_token="gw-token", audience=AUDIENCE, poll_seconds=1
    )
    return MCPGateway(upstream_server(calls), client, decision_timeout=20)


def decide_next_proposal(reviewer, key, **options):
    return testing.decide_next_proposal(reviewer, key, audience=AUDIENCE, **options)


def text(result) -> str:
    return " ".join(block.text for block in result.content)


async def test_tools_are_listed_unchanged_and_an_open_tool_is_not_gated(gateway, reviewer):
    async with Client(gateway.server) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        result = await client.call_tool("read_file", {"path": "notes/a.txt"})
    assert tools == {"delete_file", "read_file"}
    assert text(result) == "contents of notes/a.txt"
    assert reviewer.proposals == []


async def test_an_approved_call_runs_upstream_once_and_is_reported(gateway, reviewer, key, calls):
    decide_next_proposal(reviewer, key)
    async with Client(gateway.server) as client:
        result = await client.call_tool("delete_file", {"path": "notes/a.txt"})
    assert not result.is_error and text(result) == "deleted notes/a.txt"
    assert calls == ["notes/a.txt"]
    (proposal,) = reviewer.proposals
    request = proposal["body"]["request"]
    assert request["action"]["tool"] == "delete_file" and request["action"]["arguments"] == {
        "path": "notes/a.txt"
    }
    assert request["principal"]["id"].startswith("mcp-client:")
    assert request["consequences"]["risk"] == "file_write"
    jti = reviewer.consumes[0]["jti"]
    assert reviewer.outcomes_for(jti) == ["succeeded"]


async def test_a_rejection_is_a_tool_error_with_the_reason_and_nothing_runs(gateway, reviewer, key, calls):
    decide_next_proposal(reviewer, key, decision="rejected", reason="that file is evidence")
    async with Client(gateway.server) as client:
        result = await client.call_tool("delete_file", {"path": "notes/a.txt"})
    assert result.is_error and "that file is evidence" in text(result)
    assert calls == [] and reviewer.consumes == []


async def test_an_expired_proposal_is_an_error_and_nothing_runs(gateway, reviewer, key, calls):
    decide_next_proposal(reviewer, key, close="expired")
    async with Client(gateway.server) as client:
        result = await client.call_tool("delete_file", {"path": "notes/a.txt"})
    assert result.is_error and "expired" in text(result)
    assert calls == []


async def test_a_forged_decision_is_an_error_and_nothing_runs(gateway, reviewer, calls):
    decide_next_proposal(reviewer, ReviewerKey())  # a key Reviewer does not publish
    async with Client(gateway.server) as client:
        result = await client.call_tool("delete_file", {"path": "notes/a.txt"})
    assert result.is_error and "unknown_kid" in text(result)
    assert calls == [] and reviewer.consumes == []


async def test_a_repeated_call_asks_again_and_a_replayed_decision_is_refused(gateway, reviewer, key, calls):
    decide_next_proposal(reviewer, key)
    async with Client(gateway.server) as client:
        await client.call_tool("delete_file", {"path": "notes/a.txt"})
        first_token = reviewer.token_of(reviewer.proposal_id_of(reviewer.proposals[0]["body"]["task_id"]))
        # The second call is its own proposal; Reviewer answers it with the FIRST call's decision.
        seen = len(reviewer.proposals)

        def replay():
            while len(reviewer.proposals) <= seen:
                threading.Event().wait(0.01)
            reviewer.decide(reviewer.proposal_id_of(reviewer.proposals[-1]["body"]["task_id"]), first_token)

        threading.Thread(target=replay, daemon=True).start()
        result = await client.call_tool("delete_file", {"path": "notes/a.txt"})
    assert len(reviewer.proposals) == 2
    assert result.is_error and "wrong_task" in text(result)
    assert calls == ["notes/a.txt"]


async def test_progress_notifications_keep_the_client_informed(reviewer, key, calls):
    client = ReviewerClient(reviewer_url=reviewer.url, api_token="t", audience=AUDIENCE, poll_seconds=0)
    gateway = MCPGateway(upstream_server(calls), client, decision_timeout=20)
    progress = []

    async def on_progress(value, total, message):
        progress.append(message)
        if len(progress) == 2:  # the call was submitted before its first progress notification
            decide_next_proposal(reviewer, key, seen=0)

    async with Client(gateway.server) as mcp_client:
        result = await mcp_client.call_tool(
            "delete_file", {"path": "notes/b.txt"}, progress_callback=on_progress
        )
    assert not result.is_error
    assert progress[0].startswith("waiting for a reviewer's decision")


def test_the_default_rules_gate_by_risk_hint_and_patterns_override_it():
    assert [risk_hint(n) for n in ("run_shell", "write_note", "http_post_json", "get_weather")] == [
        "shell_exec",
        "file_write",
        "external_api_write",
        None,
    ]
    rules = GatingRules.of(gated=["payments.*"], open=["write_scratch"])
    assert rules.is_gated("payments.refund") and rules.is_gated("delete_file")
    assert not rules.is_gated("write_scratch") and not rules.is_gated("get_weather")
