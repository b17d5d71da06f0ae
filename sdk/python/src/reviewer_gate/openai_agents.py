"""The OpenAI Agents SDK's tool approvals, decided by Reviewer (extra `openai-agents`).

    approvals = ReviewerApprovals(client, principal={"id": "u-7", "display": "Casey"})
    refund = approvals.gate(refund, ToolDescription(name="payments.refund", currency="EUR"))
    agent = Agent(name="ops", tools=[refund, lookup_order])
    result = await approvals.run(agent, "Refund order 1182")     # Runner.run + Reviewer's decisions

`gate(tool)` turns on the SDK's approval hook for a `FunctionTool` (`needs_approval=True`), so the run
stops with an interruption before the call, and makes the tool itself enforce Reviewer's decision: it
runs only with an approval that Reviewer signed for THIS call id, that the gate verified and that
was consumed, with the approved arguments (a reviewer's edit when there was one), once; inside it,
`reviewer_gate.current_approval().idempotency_key` is the key to send downstream. A call
approved any other way (`state.approve(item)` by hand) returns an error to the model and runs nothing.

`run(agent, input)` is `Runner.run` that, at each interruption for a gated tool, submits the call as a
proposal (the tool and its parsed arguments are the action, described for the reviewers by the tool's
`ToolDescription`, reviewer_gate/describe.py, whose `principal` gets the run's `context`, or by
defaults from the tool's description and JSON schema), waits for the decision (long poll; none when
policy decided at intake), and
approves the item (Reviewer approved: the tool will run) or rejects it with the reviewer's reason as
the message the model reads. Interruptions of tools it does not gate are left to the caller.

Several interruptions of one turn (the model asked for several gated calls at once) are asked about
as one batch (docs/agents/batches.md: one page, one vote, each member its own decision), or, when
Reviewer will not batch them (`not_batchable`, `batch_too_large`, `batch_over_total`), each as its own
proposal, all submitted before any is waited for; each approved call runs once.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from agents import Agent, FunctionTool, Runner, RunResult
from agents.tool_context import ToolContext

from reviewer_gate.client import (
    NOT_AS_A_BATCH,
    Approval,
    BatchRefused,
    NotApproved,
    ReviewerClient,
    Submission,
    build_request,
    running_under,
)
from reviewer_gate.describe import ToolDescription
from reviewer_gate.risk import risk_hint

_NAMESPACE = uuid.UUID("0e7f6b52-8d0a-4c1e-9a57-2f3c6d8b1e44")  # batch ids of this adapter


def _argument_names(tool: FunctionTool) -> tuple[str, ...]:
    """The tool's arguments in its JSON schema's order."""
    return tuple((tool.params_json_schema or {}).get("properties") or {})


def _call_of(item: Any) -> tuple[str, str, dict[str, Any]]:
    """(call id, tool name, parsed arguments) of a ToolApprovalItem's raw function call."""
    raw = item.raw_item

    def field(name: str) -> Any:  # the raw call is a dict or a model object, depending on the model
        return raw.get(name) if isinstance(raw, dict) else getattr(raw, name, None)

    arguments = field("arguments") or "{}"
    parsed = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
    return str(field("call_id") or field("id")), str(item.name or field("name")), parsed


class ReviewerApprovals:
    def __init__(
        self,
        client: ReviewerClient,
        *,
        principal: dict[str, Any] | None = None,
        agent_version: str = "openai-agents",
        decision_timeout: float | None = None,
    ):
        self.client = client
        self.principal = principal or {"id": "openai-agents", "display": "OpenAI Agents SDK run"}
        self.agent_version = agent_version
        self.decision_timeout = decision_timeout
        self._gated: dict[str, tuple[FunctionTool, ToolDescription]] = {}
        self._released: dict[str, Approval] = {}  # call id -> verified, consumed, not yet used

    def gate(self, tool: FunctionTool, description: ToolDescription | None = None) -> FunctionTool:
        """Make `tool` ask Reviewer (the SDK's approval hook) and run only on a released approval;
        `description` says how its calls read for the reviewers (checked now against its schema)."""
        description = (description or ToolDescription()).checked(tool.name, _argument_names(tool))
        original = tool.on_invoke_tool

        async def invoke_with_approval(context: ToolContext[Any], _arguments: str) -> Any:
            approval = self._released.pop(context.tool_call_id, None)  # single use
            if approval is None:
                return f"{tool.name} was not approved by Reviewer for this call; nothing was run."
            arguments = approval.action.get("arguments") or {}
            try:
                with running_under(approval):  # the tool reads current_approval().idempotency_key
                    output = await original(context, json.dumps(arguments))
            except Exception as error:
                await approval.areport("unknown", detail=f"tool raised {error!r}"[:2000])
                raise
            await approval.areport("succeeded")
            return output

        tool.on_invoke_tool = invoke_with_approval
        tool.needs_approval = True
        self._gated[tool.name] = (tool, description)
        return tool

    async def run(self, agent: Agent, input: Any, **run_options: Any) -> RunResult:  # noqa: A002 - Runner's name
        """`Runner.run`, resolving the interruptions of gated tools with Reviewer until none is left."""
        result = await Runner.run(agent, input, **run_options)
        while result.interruptions:
            ours = [item for item in result.interruptions if _call_of(item)[1] in self._gated]
            if not ours:
                return result  # approvals for tools this object does not gate: the caller's
            state = result.to_state()
            if len(ours) > 1:
                await self._decide_together(state, ours, run_options.get("context"))
            else:
                await self._decide(state, ours[0], run_options.get("context"))
            result = await Runner.run(agent, state, **run_options)
        return result

    def _fields(self, item: Any, context: Any) -> dict[str, Any]:
        """The approval request's fields for one interruption (its action among them)."""
        _call_id, tool_name, arguments = _call_of(item)
        tool, description = self._gated[tool_name]
        fields = description.request_fields(
            tool_name,
            arguments,
            tool_text=tool.description or "",
            argument_order=_argument_names(tool),
            context=context,
            default_principal=self.principal,
            effect=f"runs the tool {tool_name}",
        )
        fields["consequences"].setdefault("risk", risk_hint(tool_name) or "gated")
        return fields

    async def _decide(self, state: Any, item: Any, context: Any) -> None:
        call_id = _call_of(item)[0]
        fields = self._fields(item, context)
        try:
            approval: Approval | NotApproved = await self.client.arequest_approval(
                fields.pop("action"),
                **fields,
                task_id=f"openai-agents-{call_id}",
                agent_version=self.agent_version,
                timeout=self.decision_timeout,
            )
        except NotApproved as refusal:
            approval = refusal
        await self._settle(state, item, approval)

    async def _decide_together(self, state: Any, items: list[Any], context: Any) -> None:
        """Several interruptions of one turn: one batch (or, where Reviewer will not batch them, one
        proposal each), all submitted before any decision is waited for."""
        requests = []
        for item in items:
            fields = self._fields(item, context)
            requests.append(build_request(fields.pop("action"), **fields, agent_version=self.agent_version))
        call_ids = [_call_of(item)[0] for item in items]
        key = str(uuid.uuid5(_NAMESPACE, "/".join(call_ids)))
        try:
            submissions = await asyncio.to_thread(
                self.client.submit_batch,
                requests,
                batch_id=f"openai-agents-{key}",
                summary=f"{len(items)} tool calls of one turn",
                task_id=f"openai-agents-batch-{key}",
            )
        except BatchRefused as refused:
            if refused.code not in NOT_AS_A_BATCH:
                raise
            submissions = [
                await asyncio.to_thread(self.client.submit, request, task_id=f"openai-agents-{call_id}")
                for request, call_id in zip(requests, call_ids, strict=True)
            ]
        outcomes = await asyncio.gather(*(self._outcome_of(submission) for submission in submissions))
        for item, outcome in zip(items, outcomes, strict=True):
            await self._settle(state, item, outcome)

    async def _outcome_of(self, submission: Submission) -> Approval | NotApproved:
        try:
            return await self.client.await_release(submission, timeout=self.decision_timeout)
        except NotApproved as refusal:
            return refusal

    async def _settle(self, state: Any, item: Any, approval: Approval | NotApproved) -> None:
        """Approve the item (the tool will run with this approval) or reject it with the reason."""
        call_id, tool_name, _arguments = _call_of(item)
        description = self._gated[tool_name][1]
        if isinstance(approval, NotApproved):
            refusal = approval
            if refusal.code == "rejected":
                message = f"Rejected by the reviewer: {refusal.reason or 'no reason given'}. Nothing was run."
            else:
                message = f"Not approved ({refusal.code}): {refusal.reason}. Nothing was run."
            state.reject(item, rejection_message=message)
            return
        if approval.action.get("tool") != (description.name or tool_name):
            await approval.areport("failed", detail="the approved action names another tool; nothing was run")
            state.reject(item, rejection_message="The approved action names another tool; nothing was run.")
            return
        self._released[call_id] = approval
        state.approve(item)
