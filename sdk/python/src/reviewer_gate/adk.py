"""Google ADK's tool confirmation, decided by Reviewer (extra `adk`).

    approvals = ReviewerConfirmations(client, principal={"id": "u-7", "display": "Casey"})
    refund_tool = approvals.gate(refund, ToolDescription(name="payments.refund", currency="EUR"))
    agent = LlmAgent(name="ops", model=..., tools=[refund_tool, lookup_order])
    runner = Runner(app_name="ops", agent=agent, session_service=sessions)
    events = await approvals.run(runner, user_id="u-7", session_id=session.id, new_message=message)

`gate(function)` is an ADK `FunctionTool` with `require_confirmation=True`, so a run stops with ADK's
`adk_request_confirmation` call before the tool runs, and the tool itself enforces Reviewer's
decision: it runs only with an approval that Reviewer signed for THIS function call id, that the gate
verified and that was consumed, with the approved arguments (a reviewer's edit when there was one),
once; inside it, `reviewer_gate.current_approval().idempotency_key` is the key to send downstream. A
call confirmed any other way (a `ToolConfirmation(confirmed=True)` sent by hand) returns an error to
the model and runs nothing.

`run(runner, ...)` is `runner.run_async` that, at each confirmation request for a gated tool, submits
the call as a proposal (described by the tool's `ToolDescription`, whose `principal` gets the run's
`context` keyword), waits for the decision (long poll; none when policy decided at intake) and answers
the request: confirmed when Reviewer approved, not confirmed otherwise; the gated tool then answers
the model with the reviewer's reason instead of ADK's reasonless "rejected". Confirmation requests for
tools it does not gate are left to the caller: the events so far are returned with them pending.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from google.adk.events import Event
from google.adk.runners import Runner
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from reviewer_gate.client import Approval, NotApproved, ReviewerClient, running_under
from reviewer_gate.describe import ToolDescription
from reviewer_gate.risk import risk_hint

# ADK's name for the function call that asks the client to confirm a tool call.
CONFIRMATION_CALL = "adk_request_confirmation"


def _refusal_text(refusal: NotApproved) -> str:
    if refusal.code == "rejected":
        return f"Rejected by the reviewer: {refusal.reason or 'no reason given'}. Nothing was run."
    return f"Not approved ({refusal.code}): {refusal.reason}. Nothing was run."


class _ReviewedTool(FunctionTool):
    """A FunctionTool that asks for confirmation and, once confirmed, runs only on the approval that
    ReviewerConfirmations released for its function call id."""

    def __init__(self, func: Callable[..., Any], released: dict[str, Approval], refused: dict[str, str]):
        super().__init__(func, require_confirmation=True)
        self._released = released
        self._refused = refused

    async def check_require_confirmation(self, args: dict[str, Any], tool_context: ToolContext) -> bool:
        if (tool_context.function_call_id or "") in self._refused:
            return False  # let run_async answer with Reviewer's reason, not ADK's reasonless rejection
        return await super().check_require_confirmation(args, tool_context)

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        call_id = tool_context.function_call_id or ""
        if call_id in self._refused:
            return {"error": self._refused.pop(call_id)}  # why Reviewer said no; nothing runs
        confirmation = tool_context.tool_confirmation
        if confirmation is None or not confirmation.confirmed:
            return await super().run_async(args=args, tool_context=tool_context)  # ask, or ADK's refusal
        approval = self._released.pop(call_id, None)  # single use
        if approval is None:
            return {"error": f"{self.name} was not approved by Reviewer for this call; nothing was run."}
        try:
            with running_under(approval):  # the tool reads current_approval().idempotency_key
                output = await super().run_async(
                    args=dict(approval.action.get("arguments") or {}), tool_context=tool_context
                )
        except Exception as error:
            await approval.areport("unknown", detail=f"tool raised {error!r}"[:2000])
            raise
        await approval.areport("succeeded")
        return output


class ReviewerConfirmations:
    def __init__(
        self,
        client: ReviewerClient,
        *,
        principal: dict[str, Any] | None = None,
        agent_version: str = "adk",
        decision_timeout: float | None = None,
    ):
        self.client = client
        self.principal = principal or {"id": "adk", "display": "ADK run"}
        self.agent_version = agent_version
        self.decision_timeout = decision_timeout
        # tool name -> (the tool, how it reads, its argument names in the function's order)
        self._gated: dict[str, tuple[FunctionTool, ToolDescription, tuple[str, ...]]] = {}
        self._released: dict[str, Approval] = {}  # function call id -> verified, consumed, not yet used
        self._refused: dict[str, str] = {}  # function call id -> why Reviewer did not approve it

    def gate(self, func: Callable[..., Any], description: ToolDescription | None = None) -> FunctionTool:
        """An ADK tool for `func` that asks Reviewer before each call; `description` says how its calls
        read for the reviewers (checked now against the function's parameters)."""
        tool = _ReviewedTool(func, self._released, self._refused)
        arguments = tuple(name for name in inspect.signature(func).parameters if name != "tool_context")
        description = (description or ToolDescription()).checked(tool.name, arguments)
        self._gated[tool.name] = (tool, description, arguments)
        return tool

    async def run(
        self,
        runner: Runner,
        *,
        user_id: str,
        session_id: str,
        new_message: types.Content,
        context: Any = None,
        **run_options: Any,
    ) -> list[Event]:
        """`runner.run_async` until no confirmation of a gated tool is pending; every event, in order.
        `context` is what a description's `principal` function gets (the run's user, say)."""
        events: list[Event] = []
        message: types.Content | None = new_message
        while message is not None:
            turn = [
                event
                async for event in runner.run_async(
                    user_id=user_id, session_id=session_id, new_message=message, **run_options
                )
            ]
            events.extend(turn)
            parts = [await self._answer(call, context) for call in self._our_confirmation_calls(turn)]
            message = types.Content(role="user", parts=parts) if parts else None
        return events

    def _our_confirmation_calls(self, events: list[Event]) -> list[types.FunctionCall]:
        calls = [
            part.function_call
            for event in events
            for part in (event.content.parts or [] if event.content else [])
            if part.function_call is not None and part.function_call.name == CONFIRMATION_CALL
        ]
        return [
            call
            for call in calls
            if ((call.args or {}).get("originalFunctionCall") or {}).get("name") in self._gated
        ]

    async def _answer(self, confirmation: types.FunctionCall, context: Any) -> types.Part:
        """The answer to one confirmation request: confirmed (the approval is released to the tool),
        or not (the tool will tell the model why)."""
        original = (confirmation.args or {})["originalFunctionCall"]
        call_id, tool_name = str(original.get("id")), str(original["name"])
        tool, description, arguments = self._gated[tool_name]
        fields = description.request_fields(
            tool_name,
            dict(original.get("args") or {}),
            tool_text=tool.description or "",
            argument_order=arguments,
            context=context,
            default_principal=self.principal,
            effect=f"runs the tool {tool_name}",
        )
        fields["consequences"].setdefault("risk", risk_hint(tool_name) or "gated")
        try:
            approval = await self.client.arequest_approval(
                fields.pop("action"),
                **fields,
                task_id=f"adk-{call_id}",
                agent_version=self.agent_version,
                timeout=self.decision_timeout,
            )
        except NotApproved as refusal:
            self._refused[call_id] = _refusal_text(refusal)
            return self._answered(confirmation, confirmed=False)
        if approval.action.get("tool") != (description.name or tool_name):
            await approval.areport("failed", detail="the approved action names another tool; nothing was run")
            self._refused[call_id] = "The approved action names another tool; nothing was run."
            return self._answered(confirmation, confirmed=False)
        self._released[call_id] = approval
        return self._answered(confirmation, confirmed=True)

    @staticmethod
    def _answered(confirmation: types.FunctionCall, *, confirmed: bool) -> types.Part:
        answer = {"confirmed": confirmed}
        response = types.FunctionResponse(id=confirmation.id, name=CONFIRMATION_CALL, response=answer)
        return types.Part(function_response=response)
