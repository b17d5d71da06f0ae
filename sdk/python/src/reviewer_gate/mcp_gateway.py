"""An MCP server that fronts an upstream MCP server and asks Reviewer before its risky tools run
(extra `mcp`; the official `mcp` SDK).

    python -m reviewer_gate.mcp_gateway --reviewer-url https://reviewer.example.com \\
        --audience urn:agent:mcp-gateway [--tenant acme] [--agent-slug mcp-gateway] \\
        [--gate 'payments.*'] [--open 'read_*'] \\
        [--listen stdio | --listen http://127.0.0.1:8765/mcp] \\
        (--upstream-url http://127.0.0.1:9000/mcp | -- python -m my_tools_server)
    # the API token comes from REVIEWER_API_TOKEN

- `tools/list` answers the upstream's tools unchanged.
- A call to a tool that is not gated goes straight upstream.
- A call to a gated tool (`--gate` name patterns; by default the risk hint by tool name: shell/exec,
  file writes, external API writes; `--open` patterns never) becomes a Reviewer proposal: the tool and
  its arguments are the action, the calling MCP client is the principal. While it waits the gateway
  sends MCP progress notifications (when the client asked for them with a progress token). Only an
  approved decision that verified with the gate and was consumed calls the upstream tool, once, with
  the approved arguments (a reviewer's edit when there was one). The outcome goes back to Reviewer.
- A rejection returns a tool error with the reviewer's reason; an expiry, a revocation, a refused
  or forged decision returns a tool error too, and nothing is called upstream.

Every gated call is its own proposal: a client that repeats a call asks again (a decision is single
use), so an approval can never be replayed onto a second call.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from reviewer_gate import __version__
from reviewer_gate.client import Approval, NotApproved, ReviewerClient
from reviewer_gate.gate import SQLiteUsedStore
from reviewer_gate.risk import GatingRules, risk_hint

logger = logging.getLogger(__name__)

# The decision id, sent upstream in the call's _meta: an upstream that keys its side effect on it
# never acts twice for one approval.
IDEMPOTENCY_META = "io.github.reviewer/idempotency-key"
DETAIL_CHARACTERS = 200  # the arguments shown in the summary, cut like the oversight notes' detail


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def _summary(tool: str, arguments: dict) -> str:
    detail = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    if len(detail) > DETAIL_CHARACTERS:
        detail = detail[: DETAIL_CHARACTERS - 1] + "…"
    return f"MCP tool {tool} {detail}"


def _label_of(upstream: Any) -> str:
    if isinstance(upstream, str):
        return upstream
    if isinstance(upstream, StdioServerParameters):
        return " ".join([upstream.command, *upstream.args])
    return getattr(upstream, "name", None) or type(upstream).__name__  # an in-process server (tests)


class MCPGateway:
    """The gateway for one upstream MCP server: a URL (streamable HTTP), a stdio command, or anything
    else `mcp.Client` connects to (an in-process server in tests)."""

    def __init__(
        self,
        upstream: str | StdioServerParameters | Any,
        reviewer: ReviewerClient,
        *,
        rules: GatingRules | None = None,
        upstream_label: str | None = None,
        ttl_seconds: int | None = None,
        decision_timeout: float | None = None,
        name: str = "reviewer-gateway",
    ):
        self.upstream = upstream
        self.reviewer = reviewer
        self.rules = rules or GatingRules()
        self.upstream_label = upstream_label or _label_of(upstream)
        self.ttl_seconds = ttl_seconds
        self.decision_timeout = decision_timeout
        self.server = Server(
            name,
            version=__version__,
            lifespan=self._connected,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    @asynccontextmanager
    async def _connected(self, _server: Server) -> AsyncIterator[dict[str, Any]]:
        """One upstream client session for the life of the gateway."""
        async with Client(self.upstream) as upstream:
            yield {"upstream": upstream}

    async def _list_tools(self, ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        upstream: Client = ctx.lifespan_context["upstream"]
        return await upstream.list_tools(cursor=params.cursor if params else None)

    async def _call_tool(self, ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        upstream: Client = ctx.lifespan_context["upstream"]
        arguments = dict(params.arguments or {})
        if not self.rules.is_gated(params.name):
            return await upstream.call_tool(params.name, arguments)
        try:
            approval = await self._approval(ctx, params.name, arguments)
        except NotApproved as refusal:
            if refusal.code == "rejected":
                return _error(
                    f"Rejected by the reviewer: {refusal.reason or 'no reason given'}. Nothing was run."
                )
            return _error(f"Not approved ({refusal.code}): {refusal.reason}. Nothing was run.")
        return await self._run_once(upstream, params.name, approval)

    async def _approval(self, ctx, tool: str, arguments: dict) -> Approval:
        client_info = ctx.session.client_params.client_info if ctx.session.client_params else None
        client_name = client_info.name if client_info else "unknown"
        action = {"tool": tool, "arguments": arguments, "target": f"mcp:{self.upstream_label}"}

        async def keep_informed(state: str, elapsed: float) -> None:
            # A no-op unless the client sent a progress token with its call.
            await ctx.session.report_progress(elapsed, None, f"waiting for a reviewer's decision ({state})")

        return await self.reviewer.arequest_approval(
            action,
            summary=_summary(tool, arguments),
            principal={"id": f"mcp-client:{client_name}", "display": client_name},
            task_id=f"mcp-call-{uuid.uuid4()}",
            agent_version=f"reviewer-gate-mcp@{__version__}",
            consequences={
                "effect": f"calls {tool} on {self.upstream_label}",
                "risk": risk_hint(tool) or "gated",
            },
            ttl_seconds=self.ttl_seconds,
            timeout=self.decision_timeout,
            on_wait=keep_informed,
        )

    async def _run_once(self, upstream: Client, tool: str, approval: Approval) -> types.CallToolResult:
        if approval.action.get("tool") != tool:  # a reviewer's edit may not switch tools under the client
            await approval.areport("failed", detail="the approved action names another tool; nothing was run")
            return _error("The approved action names another tool. Nothing was run.")
        try:
            result = await upstream.call_tool(
                tool,
                approval.action.get("arguments") or {},
                meta={IDEMPOTENCY_META: approval.idempotency_key},
            )
        except Exception as error:  # the call may or may not have happened upstream: never retried
            await approval.areport("unknown", detail=f"upstream call failed: {error!r}"[:2000])
            return _error(f"The approved call's outcome is unknown ({error}). It was not retried.")
        await approval.areport("failed" if result.is_error else "succeeded")
        return result

    # --- serving ------------------------------------------------------------------------------

    async def serve_stdio(self) -> None:
        async with stdio_server() as (read_stream, write_stream):
            await self.server.run(read_stream, write_stream, self.server.create_initialization_options())

    def http_app(self, path: str = "/mcp"):
        """A Starlette app serving the gateway over streamable HTTP at `path`."""
        return self.server.streamable_http_app(streamable_http_path=path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m reviewer_gate.mcp_gateway", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--reviewer-url", required=True)
    parser.add_argument("--audience", required=True, help="this gateway's audience registered in Reviewer")
    parser.add_argument("--issuer", help="Reviewer's iss (default: --reviewer-url)")
    parser.add_argument(
        "--tenant", help="the gateway's tenant slug: decisions for another tenant are refused"
    )
    parser.add_argument("--agent-slug", help="the gateway's agent slug in Reviewer, named in its requests")
    parser.add_argument("--gate", action="append", default=[], help="tool name pattern that is always gated")
    parser.add_argument("--open", action="append", default=[], help="tool name pattern that is never gated")
    parser.add_argument("--no-risk-hint", action="store_true", help="gate only the --gate patterns")
    parser.add_argument("--ttl", type=int, help="seconds a proposal may wait for a decision")
    parser.add_argument("--timeout", type=float, help="seconds a call waits before giving up (not approved)")
    parser.add_argument("--used-store", help="SQLite file of used decisions (shared by gateway processes)")
    parser.add_argument("--upstream-url", help="the upstream MCP server's streamable HTTP URL")
    parser.add_argument("--listen", default="stdio", help="stdio (default) or http://HOST:PORT/PATH")
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the upstream's stdio command")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)

    command = [part for part in args.command if part != "--"]
    if bool(args.upstream_url) == bool(command):
        parser.error("give exactly one upstream: --upstream-url URL, or -- COMMAND ARGS")
    upstream = args.upstream_url or StdioServerParameters(
        command=command[0], args=command[1:], env=dict(os.environ)
    )
    api_token = os.environ.get("REVIEWER_API_TOKEN")
    if not api_token:
        parser.error("set REVIEWER_API_TOKEN to the gateway's agent API token")
    reviewer = ReviewerClient(
        reviewer_url=args.reviewer_url,
        api_token=api_token,
        audience=args.audience,
        issuer=args.issuer,
        tenant=args.tenant,
        agent=args.agent_slug,
        used_store=SQLiteUsedStore(args.used_store) if args.used_store else None,
    )
    gateway = MCPGateway(
        upstream,
        reviewer,
        rules=GatingRules.of(args.gate, args.open, use_risk_hint=not args.no_risk_hint),
        ttl_seconds=args.ttl,
        decision_timeout=args.timeout,
    )
    if args.listen == "stdio":
        import anyio

        anyio.run(gateway.serve_stdio)
        return
    from urllib.parse import urlsplit

    import uvicorn

    listen = urlsplit(args.listen)
    uvicorn.run(
        gateway.http_app(listen.path or "/mcp"),
        host=listen.hostname or "127.0.0.1",
        port=listen.port or 8765,
        log_level=args.log_level,
    )


if __name__ == "__main__":
    main()
