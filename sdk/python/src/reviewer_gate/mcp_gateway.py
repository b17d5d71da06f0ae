"""An MCP server that fronts an upstream MCP server and asks Reviewer before its risky tools run
(extra `mcp`; the official `mcp` SDK).

    python -m reviewer_gate.mcp_gateway --reviewer-url https://reviewer.example.com \\
        --audience urn:agent:mcp-gateway [--tenant acme] [--agent-slug mcp-gateway] \\
        [--gate 'payments.*'] [--open 'read_*'] \\
        [--listen stdio | --listen http://127.0.0.1:8765/mcp] \\
        (--upstream-url http://127.0.0.1:9000/mcp | -- python -m my_tools_server)
    # the API token comes from REVIEWER_API_TOKEN
- `tools/list` answers the upstream's tools unchanged.
- A gated call's proposal names the upstream by `--upstream-name`, the tool by its name and its
  upstream description, the MCP client (its clientInfo) as the requester, and the target from the
  arguments; `--describe FILE` gives per-tool summaries, consequences, currency, reversibility and the
  tool name Reviewer's policies match (reviewer_gate/describe.py).
- The client sees the approval as a URL elicitation of the proposal's page when it supports that
  (inside an `input_required` answer on protocol 2026-07-28, as `elicitation/create` before), else as
  progress notifications (reviewer_gate/mcp_approval.py); the result's `_meta` says which.
- A call to a tool that is not gated goes straight upstream.
- A call to a gated tool (`--gate` name patterns; by default the risk hint by tool name: shell/exec,
  file writes, external API writes; `--open` patterns never) becomes a Reviewer proposal: the tool and
  its arguments are the action, the calling MCP client is the principal. Only an approved decision
  that verified with the gate and was consumed calls the upstream tool, once, with the approved
  arguments (a reviewer's edit when there was one). The outcome goes back to Reviewer. A rejection,
  an expiry, a revocation, a refused or forged decision returns a tool error (with the reviewer's
  reason for a rejection), and nothing is called upstream. Every gated call is its own proposal: a
  client that repeats a call asks again (a decision is single use), so no approval is replayed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from starlette.applications import Starlette

from reviewer_gate import __version__
from reviewer_gate.client import (
    Approval,
    NotApproved,
    ReviewerClient,
    ReviewerUnavailable,
    Submission,
    build_request,
)
from reviewer_gate.describe import ToolDescription
from reviewer_gate.gate import SQLiteUsedStore
from reviewer_gate.mcp_approval import (
    APPROVAL_PATH_META,
    AT_INTAKE,
    ELICITATION_KEY,
    INPUT_REQUIRED,
    URL_ELICITATION,
    BadRetry,
    PendingApprovals,
    answer_of,
    approval_path,
    client_identity,
    elicitation_message,
    page_url,
    url_elicitation,
)
from reviewer_gate.risk import GatingRules, risk_hint

logger = logging.getLogger(__name__)

# What a tool handler is given: its session, and the lifespan dict of _connected.
Context = ServerRequestContext[dict[str, Any]]
# The decision id, sent upstream in the call's _meta: an upstream that keys its side effect on it
# never acts twice for one approval.
IDEMPOTENCY_META: Final = "io.github.reviewer/idempotency-key"


def _error(text: str, path: str | None = None) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        is_error=True,
        _meta={APPROVAL_PATH_META: path} if path else None,
    )


def _label_of(upstream: Any) -> str:
    if isinstance(upstream, str):
        return upstream
    if isinstance(upstream, StdioServerParameters):
        return " ".join([upstream.command, *upstream.args])
    return getattr(upstream, "name", None) or type(upstream).__name__  # an in-process server (tests)


_PAST = {"decline": "declined", "cancel": "cancelled", None: "not shown"}  # the client's answer, said


def _refused(refusal: NotApproved, path: str) -> types.CallToolResult:
    if refusal.code == "rejected":
        return _error(
            f"Rejected by the reviewer: {refusal.reason or 'no reason given'}. Nothing was run.", path
        )
    return _error(f"Not approved ({refusal.code}): {refusal.reason}. Nothing was run.", path)


class MCPGateway:
    """The gateway for one upstream MCP server: a URL (streamable HTTP), a stdio command, or anything
    else `mcp.Client` connects to (an in-process server in tests).

    `upstream_name` is how reviewers read the server ("files", "payments"): give it; the default is the
    name the upstream gives itself (its serverInfo), else its URL or command line. `descriptions` maps an
    upstream tool's name to its ToolDescription (reviewer_gate/describe.py); a tool without one is
    described from its own description and schema.
    """

    def __init__(
        self,
        upstream: str | StdioServerParameters | Any,
        reviewer: ReviewerClient,
        *,
        rules: GatingRules | None = None,
        upstream_label: str | None = None,
        upstream_name: str | None = None,
        descriptions: Mapping[str, ToolDescription] | None = None,
        ttl_seconds: int | None = None,
        decision_timeout: float | None = None,
        name: str = "reviewer-gateway",
    ):
        self.upstream = upstream
        self.reviewer = reviewer
        self.rules = rules or GatingRules()
        self.upstream_name = (upstream_name or upstream_label or _label_of(upstream))[:200]
        self._name_given = bool(upstream_name or upstream_label)
        self.descriptions = {tool: d.checked(tool) for tool, d in (descriptions or {}).items()}
        self.ttl_seconds = ttl_seconds
        self.decision_timeout = decision_timeout
        self.pending = PendingApprovals()
        self._tools: dict[str, types.Tool] = {}  # the upstream's tools as last listed
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
            info = upstream.server_info
            if not self._name_given and info is not None and info.name:
                # Not named by the operator: the upstream's own name reads better than a command line.
                self.upstream_name = info.name[:200]
            yield {"upstream": upstream}

    async def _list_tools(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        upstream: Client = ctx.lifespan_context["upstream"]
        listed = await upstream.list_tools(cursor=params.cursor if params else None)
        self._tools.update({tool.name: tool for tool in listed.tools})
        return listed

    async def _tool(self, upstream: Client, name: str) -> types.Tool | None:
        """The upstream's own definition of a tool (its description and schema describe the call)."""
        if name not in self._tools:
            cursor = None
            while True:  # the client has not listed the tools through us (or not this page)
                listed = await upstream.list_tools(cursor=cursor)
                self._tools.update({tool.name: tool for tool in listed.tools})
                cursor = listed.next_cursor
                if name in self._tools or not cursor:
                    break
        return self._tools.get(name)

    async def _call_tool(
        self, ctx: Context, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        upstream: Client = ctx.lifespan_context["upstream"]
        arguments = dict(params.arguments or {})
        if not self.rules.is_gated(params.name):
            return await upstream.call_tool(params.name, arguments)
        if params.request_state is not None:  # a 2026-07-28 client retrying with the user's answer
            return await self._resumed(ctx, upstream, params, arguments)
        path = approval_path(ctx)
        try:
            submission = await self._submit(ctx, upstream, params.name, arguments)
        except (ValueError, ReviewerUnavailable) as refused:  # Reviewer refused or could not be reached
            return _error(f"Reviewer did not take the request ({refused}). Nothing was run.", path)
        if submission.token:
            path = AT_INTAKE  # policy decided at intake: nothing to show the user
        logger.info("approval of %s for %s: %s", params.name, client_identity(ctx)["name"], path)
        url = page_url(self.reviewer.reviewer_url, submission.proposal_id)
        message = elicitation_message(params.name, self.upstream_name, submission.request["summary"])
        if path == INPUT_REQUIRED:
            state = self.pending.put(submission, params.name, arguments)
            return types.InputRequiredResult(
                input_requests={ELICITATION_KEY: url_elicitation(message, url, state)}, request_state=state
            )
        if path == URL_ELICITATION:
            return await self._while_showing(ctx, upstream, params.name, submission, message, url)
        return await self._released_and_run(ctx, upstream, params.name, submission, path)

    async def _submit(
        self, ctx: Context, upstream: Client, tool: str, arguments: dict[str, Any]
    ) -> Submission:
        """The call as a Reviewer proposal: the upstream by its name, the tool by its name and
        description, the MCP client as the requester, the target from the arguments."""
        definition = await self._tool(upstream, tool)
        identity = client_identity(ctx)
        requester = {
            "id": f"mcp-client:{identity['name']}",
            "display": f"{identity['title']} {identity['version']}".strip(),
        }
        fields = self.descriptions.get(tool, ToolDescription()).request_fields(
            tool,
            arguments,
            tool_text=(definition.description or "") if definition else "",
            argument_order=tuple(
                ((definition.input_schema or {}) if definition else {}).get("properties") or {}
            ),
            context=identity,
            default_principal=requester,
            effect=f"calls {tool} on {self.upstream_name}",
        )
        fields["consequences"].update(
            {"mcp_server": self.upstream_name, "mcp_client": identity, "risk": risk_hint(tool) or "gated"}
        )
        request = build_request(
            **fields, agent_version=f"reviewer-gate-mcp@{__version__}", ttl_seconds=self.ttl_seconds
        )
        return await asyncio.to_thread(self.reviewer.submit, request, task_id=f"mcp-call-{uuid.uuid4()}")

    def _progress(self, ctx: Context) -> Callable[[str, float], Awaitable[None]]:
        async def keep_informed(state: str, elapsed: float) -> None:
            # A no-op unless the client sent a progress token with its call.
            await ctx.session.report_progress(elapsed, None, f"waiting for a reviewer's decision ({state})")

        return keep_informed

    async def _released_and_run(
        self, ctx: Context, upstream: Client, tool: str, submission: Submission, path: str
    ) -> types.CallToolResult:
        try:
            approval = await self.reviewer.await_release(
                submission, timeout=self.decision_timeout, on_wait=self._progress(ctx)
            )
        except NotApproved as refusal:
            return _refused(refusal, path)
        return await self._run_once(upstream, tool, approval, path)

    async def _while_showing(
        self, ctx: Context, upstream: Client, tool: str, submission: Submission, message: str, url: str
    ) -> types.CallToolResult:
        """URL elicitation on a handshake-era connection: show the page while waiting for the decision;
        a user who declines or cancels ends the wait (nothing runs)."""
        elicitation_id = f"reviewer-{submission.proposal_id}"
        shown = asyncio.ensure_future(
            ctx.session.elicit_url(message, url, elicitation_id, related_request_id=ctx.request_id)
        )
        decided = asyncio.ensure_future(
            self.reviewer.await_release(
                submission, timeout=self.decision_timeout, on_wait=self._progress(ctx)
            )
        )
        try:
            done, _ = await asyncio.wait({shown, decided}, return_when=asyncio.FIRST_COMPLETED)
            if decided not in done:
                answer = getattr(shown.result(), "action", None) if not shown.exception() else None
                if answer != "accept":
                    decided.cancel()
                    return _error(
                        f"The approval was {_PAST[answer]} in the client. Nothing was run.",
                        URL_ELICITATION,
                    )
            try:
                approval = await decided
            except NotApproved as refusal:
                return _refused(refusal, URL_ELICITATION)
        finally:
            shown.cancel()
        with contextlib.suppress(Exception):  # the client may not care that the page is done
            await ctx.session.send_elicit_complete(elicitation_id, related_request_id=ctx.request_id)
        return await self._run_once(upstream, tool, approval, URL_ELICITATION)

    async def _resumed(
        self, ctx: Context, upstream: Client, params: types.CallToolRequestParams, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        """A 2026-07-28 client's retry after it showed the page: wait for the decision, then run."""
        state = params.request_state
        pending = self.pending.take(state) if state is not None else None
        if pending is None:
            return _error(
                "This approval request is unknown or was already used; call the tool again.", INPUT_REQUIRED
            )
        try:
            if (pending.tool, pending.arguments) != (params.name, arguments):
                raise BadRetry("the retry names another tool or other arguments than the call it continues")
            answer = answer_of(params)
        except BadRetry as bad:
            return _error(f"Malformed retry: {bad}. Nothing was run.", INPUT_REQUIRED)
        if answer != "accept":
            return _error(f"The approval was {_PAST[answer]} in the client. Nothing was run.", INPUT_REQUIRED)
        return await self._released_and_run(ctx, upstream, params.name, pending.submission, INPUT_REQUIRED)

    async def _run_once(
        self, upstream: Client, tool: str, approval: Approval, path: str
    ) -> types.CallToolResult:
        sent_tool = self.descriptions.get(tool, ToolDescription()).name or tool
        if (
            approval.action.get("tool") != sent_tool
        ):  # a reviewer's edit may not switch tools under the client
            await approval.areport("failed", detail="the approved action names another tool; nothing was run")
            return _error("The approved action names another tool. Nothing was run.", path)
        try:
            result = await upstream.call_tool(
                tool,
                approval.action.get("arguments") or {},
                # RequestParamsMeta is an open map (PEP 728 extra_items), which mypy does not read yet.
                meta={IDEMPOTENCY_META: approval.idempotency_key},  # type: ignore[arg-type]
            )
        except Exception as error:  # the call may or may not have happened upstream: never retried
            await approval.areport("unknown", detail=f"upstream call failed: {error!r}"[:2000])
            return _error(f"The approved call's outcome is unknown ({error}). It was not retried.", path)
        await approval.areport("failed" if result.is_error else "succeeded")
        return result.model_copy(update={"meta": {**(result.meta or {}), APPROVAL_PATH_META: path}})

    # --- serving ------------------------------------------------------------------------------

    async def serve_stdio(self) -> None:
        async with stdio_server() as (read_stream, write_stream):
            await self.server.run(read_stream, write_stream, self.server.create_initialization_options())

    def http_app(self, path: str = "/mcp") -> Starlette:
        """A Starlette app serving the gateway over streamable HTTP at `path`."""
        return self.server.streamable_http_app(streamable_http_path=path)


DESCRIBED_FIELDS = ("name", "summary", "consequences", "target", "currency", "reversible")


def load_descriptions(path: str) -> dict[str, ToolDescription]:
    """Tool descriptions from a JSON file; anything else than the known fields is refused by name."""
    with open(path, encoding="utf-8") as file:
        described = json.load(file)
    if not isinstance(described, dict):
        raise ValueError("a JSON object {tool name: description}")
    descriptions = {}
    for tool, fields in described.items():
        unknown = (
            sorted(set(fields) - set(DESCRIBED_FIELDS)) if isinstance(fields, dict) else ["(not an object)"]
        )
        if unknown:
            raise ValueError(
                f"{tool}: unknown field(s) {', '.join(unknown)}; known: {', '.join(DESCRIBED_FIELDS)}"
            )
        descriptions[tool] = ToolDescription(**fields).checked(tool)
    return descriptions


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
    parser.add_argument(
        "--progress-seconds",
        type=float,
        default=5,
        help="how often a waiting call sends a progress notification (when its client asked for them)",
    )
    parser.add_argument("--used-store", help="SQLite file of used decisions (shared by gateway processes)")
    parser.add_argument("--upstream-url", help="the upstream MCP server's streamable HTTP URL")
    parser.add_argument("--upstream-name", help="the upstream's name as reviewers read it (e.g. payments)")
    parser.add_argument(
        "--describe",
        help="a JSON file {tool: {name, summary, consequences, target, currency, reversible}} describing "
        "gated tools for the reviewers (reviewer_gate/describe.py)",
    )
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
        progress_seconds=args.progress_seconds,
    )
    try:
        descriptions = load_descriptions(args.describe) if args.describe else None
    except (OSError, ValueError) as error:
        parser.error(f"--describe {args.describe}: {error}")
    gateway = MCPGateway(
        upstream,
        reviewer,
        rules=GatingRules.of(args.gate, args.open, use_risk_hint=not args.no_risk_hint),
        upstream_name=args.upstream_name,
        descriptions=descriptions,
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
