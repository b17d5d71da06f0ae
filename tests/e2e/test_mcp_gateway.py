"""The MCP gateway end to end: the mcp SDK's client → `python -m reviewer_gate.mcp_gateway` (its own
process) → a small upstream MCP server (examples/mcp/files_server.py, its own process) whose
`delete_file` records every call that reaches it; Reviewer (Daphne + worker) decides, a reviewer signs
in and votes with real TOTP codes in its forms. Over stdio (client → gateway → upstream) and over
streamable HTTP (client → gateway → upstream)."""

import asyncio
import json
import os
import socket
import sys
import threading

import pytest
from mcp import Client, StdioServerParameters

from approvals.models import Proposal
from approvals.services.agents import register_agent
from approvals.states import State
from tests import factories
from tests.e2e.test_a2a_loop import decide_in_browser, wait_for
from tests.examples.harness import CHECKOUT_PYTHONPATH, free_port
from tests.reviewer_processes import REPO, ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

AUDIENCE = "urn:agent:mcp-gateway"
API_TOKEN = "mcp-gateway-token"


@pytest.fixture
def registered(reviewer_stack):
    tenant = factories.make_tenant()
    reviewer = factories.make_user("reviewer_a", tenant=tenant, groups=["finance"], first_name="Alice")
    factories.make_policy(
        tenant, "file-deletes", tool_pattern="delete_file", thresholds=[{"group": "finance", "count": 1}]
    )
    # A pull agent (no card URL): Reviewer never calls it; it reads its decisions by pull.
    register_agent(
        tenant=tenant,
        slug="mcp-gateway",
        name="MCP gateway",
        card_url="",
        audience=AUDIENCE,
        push_token="unused",
        api_token=API_TOKEN,
    )
    return reviewer


def gateway_args(stack, *, ttl: int = 600, progress_seconds: float = 5) -> list[str]:
    return [
        "-m",
        "reviewer_gate.mcp_gateway",
        "--reviewer-url",
        stack.url,
        "--audience",
        AUDIENCE,
        "--ttl",
        str(ttl),
        "--progress-seconds",
        str(progress_seconds),
    ]


def environment() -> dict:
    return {**os.environ, "PYTHONPATH": CHECKOUT_PYTHONPATH, "REVIEWER_API_TOKEN": API_TOKEN}


def stdio_gateway(stack, record, *, ttl: int = 600, progress_seconds: float = 5) -> StdioServerParameters:
    upstream = [sys.executable, "-m", "examples.mcp.files_server", "--record", str(record)]
    return StdioServerParameters(
        command=sys.executable,
        args=[*gateway_args(stack, ttl=ttl, progress_seconds=progress_seconds), "--", *upstream],
        env=environment(),
        cwd=REPO,
    )


class ToolCall(threading.Thread):
    """One MCP client session calling one tool, in the background while the test plays the reviewer."""

    def __init__(self, server, tool: str, arguments: dict, *, with_progress: bool = False):
        super().__init__(daemon=True)
        self.server, self.tool, self.arguments = server, tool, arguments
        self.with_progress = with_progress
        self.progress: list[tuple[float, str | None]] = []  # (progress, message) as the client heard them
        self.result = None
        self.error: BaseException | None = None

    def run(self):
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            self.progress.append((progress, message))

        async def call():
            async with Client(self.server, read_timeout_seconds=60) as client:
                return await client.call_tool(
                    self.tool, self.arguments, progress_callback=on_progress if self.with_progress else None
                )

        try:
            self.result = asyncio.run(call())
        except BaseException as error:  # reported by outcome()
            self.error = error

    def outcome(self, timeout: float = 60):
        self.join(timeout)
        assert not self.is_alive(), "the tool call did not return"
        if self.error:
            raise self.error
        return self.result


def text(result) -> str:
    return " ".join(block.text for block in result.content)


def recorded(record) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def proposals_after(count: int, stack):
    return wait_for(
        lambda: list(Proposal.objects.order_by("created_at"))[count:] or None,
        "the gateway's proposal",
        stack=stack,
    )


def test_an_approved_call_reaches_the_upstream_once(reviewer_stack, registered, tmp_path):
    record = tmp_path / "calls.jsonl"
    call = ToolCall(stdio_gateway(reviewer_stack, record), "delete_file", {"path": "reports/q3.xlsx"})
    call.start()
    (proposal,) = proposals_after(0, reviewer_stack)
    assert proposal.action == {
        "tool": "delete_file",
        "arguments": {"path": "reports/q3.xlsx"},
        "target": proposal.action["target"],
    }
    assert proposal.principal_id.startswith("mcp-client:")
    assert recorded(record) == []  # nothing ran while it waited

    decide_in_browser(reviewer_stack, registered, proposal, "approve")

    result = call.outcome()
    assert not result.is_error, text(result)
    assert [c["path"] for c in recorded(record)] == ["reports/q3.xlsx"]
    wait_for(
        lambda: Proposal.objects.get(pk=proposal.pk).state == State.SUCCEEDED,
        "succeeded",
        stack=reviewer_stack,
    )


def test_a_rejected_call_is_a_tool_error_with_the_reason(reviewer_stack, registered, tmp_path):
    record = tmp_path / "calls.jsonl"
    call = ToolCall(stdio_gateway(reviewer_stack, record), "delete_file", {"path": "ledger.db"})
    call.start()
    (proposal,) = proposals_after(0, reviewer_stack)

    decide_in_browser(reviewer_stack, registered, proposal, "reject", reason="the ledger is evidence")

    result = call.outcome()
    assert result.is_error and "the ledger is evidence" in text(result)
    assert recorded(record) == []


def test_an_expired_call_is_an_error_and_calls_nothing(reviewer_stack, registered, tmp_path):
    record = tmp_path / "calls.jsonl"
    call = ToolCall(stdio_gateway(reviewer_stack, record, ttl=2), "delete_file", {"path": "old.log"})
    call.start()
    (proposal,) = proposals_after(0, reviewer_stack)

    result = call.outcome()  # nobody decides: the worker expires it

    assert result.is_error and "expired" in text(result)
    assert Proposal.objects.get(pk=proposal.pk).state == State.EXPIRED
    assert recorded(record) == []


def test_a_replayed_call_needs_its_own_approval(reviewer_stack, registered, tmp_path):
    record = tmp_path / "calls.jsonl"
    server = stdio_gateway(reviewer_stack, record)
    first = ToolCall(server, "delete_file", {"path": "tmp/cache"})
    first.start()
    (proposal,) = proposals_after(0, reviewer_stack)
    decide_in_browser(reviewer_stack, registered, proposal, "approve")
    assert not first.outcome().is_error

    again = ToolCall(server, "delete_file", {"path": "tmp/cache"})  # the same call, sent again
    again.start()
    (second,) = proposals_after(1, reviewer_stack)
    assert second.pk != proposal.pk and second.action == proposal.action
    decide_in_browser(reviewer_stack, registered, second, "reject", reason="already done")

    assert again.outcome().is_error
    assert len(recorded(record)) == 1  # the first approval released exactly one call


def http_gateway(stack, record, *, progress_seconds: float = 5) -> str:
    """The upstream and the gateway as processes serving streamable HTTP; the gateway's URL."""
    upstream_port, gateway_port = free_port(), free_port()
    upstream = ServerProcess(
        "mcp-upstream",
        [
            sys.executable,
            "-m",
            "examples.mcp.files_server",
            "--record",
            str(record),
            "--http",
            f"127.0.0.1:{upstream_port}",
        ],
        env=environment(),
        log_dir=stack.log_dir,
    ).start()
    gateway = ServerProcess(
        "mcp-gateway",
        [
            sys.executable,
            *gateway_args(stack, progress_seconds=progress_seconds),
            "--upstream-url",
            f"http://127.0.0.1:{upstream_port}/mcp",
            "--listen",
            f"http://127.0.0.1:{gateway_port}/mcp",
        ],
        env=environment(),
        log_dir=stack.log_dir,
    )
    stack.processes += [upstream, gateway]
    upstream.wait_until(lambda: _port_open(upstream_port), "the upstream listening")
    gateway.start()
    gateway.wait_until(lambda: _port_open(gateway_port), "the gateway listening")
    return f"http://127.0.0.1:{gateway_port}/mcp"


def test_over_streamable_http_with_an_ungated_tool_passing_through(reviewer_stack, registered, tmp_path):
    record = tmp_path / "calls.jsonl"
    url = http_gateway(reviewer_stack, record)

    read = ToolCall(url, "read_file", {"path": "notes.txt"})
    read.start()
    assert text(read.outcome()) == "contents of notes.txt"
    assert not Proposal.objects.exists()  # read_file is not gated

    call = ToolCall(url, "delete_file", {"path": "notes.txt"})
    call.start()
    (proposal,) = proposals_after(0, reviewer_stack)
    decide_in_browser(reviewer_stack, registered, proposal, "approve")
    assert not call.outcome().is_error
    assert [c["path"] for c in recorded(record)] == ["notes.txt"]


def _port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("transport", ["stdio", "streamable-http"])
def test_progress_reaches_the_clients_callback_while_the_call_waits(
    reviewer_stack, registered, tmp_path, transport
):
    """The official client's progress_callback hears from the gateway at once and then every
    --progress-seconds while a long poll (30 s, the client's default) is out: before this, the first
    notification came only when a poll returned without a decision."""
    record = tmp_path / "calls.jsonl"
    server = (
        stdio_gateway(reviewer_stack, record, progress_seconds=0.5)
        if transport == "stdio"
        else http_gateway(reviewer_stack, record, progress_seconds=0.5)
    )
    call = ToolCall(server, "delete_file", {"path": "reports/q4.xlsx"}, with_progress=True)
    call.start()
    (proposal,) = proposals_after(0, reviewer_stack)

    wait_for(lambda: len(call.progress) >= 3 or None, "three progress notifications", stack=reviewer_stack)
    assert recorded(record) == []  # still waiting for people
    values = [value for value, _ in call.progress]
    assert values == sorted(values) and all(
        message and message.startswith("waiting for a reviewer's decision") for _, message in call.progress
    )

    decide_in_browser(reviewer_stack, registered, proposal, "approve")
    assert not call.outcome().is_error
    assert [c["path"] for c in recorded(record)] == ["reports/q4.xlsx"]
