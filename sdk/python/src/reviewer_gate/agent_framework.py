"""Microsoft Agent Framework's function approval requests, decided by Reviewer (extra `agent-framework`).

    approvals = ReviewerApprovals(client, principal={"id": "u-7", "display": "Casey"})
    refund = approvals.gate(refund, ToolDescription(name="payments.refund", currency="EUR"))
    agent = Agent(client=chat_client, tools=[refund, lookup_order])
    response = await approvals.run(agent, "Refund order 1182")   # agent.run + Reviewer's decisions

`gate(tool)` sets the framework's `approval_mode="always_require"` on a `FunctionTool`, so a run stops
with a `function_approval_request` before the call, and makes the tool itself enforce Reviewer's
decision: it runs only with an approval that Reviewer signed for THIS call id, that the gate verified
and that was consumed, with the approved arguments (a reviewer's edit when there was one), once;
inside it, `reviewer_gate.current_approval().idempotency_key` is the key to send downstream. A call
approved any other way (`request.to_function_approval_response(approved=True)` by hand) returns an
error to the model and runs nothing.

`run(agent, input)` is `agent.run` that, at each function approval request for a gated tool, submits
the call as a proposal (described by the tool's `ToolDescription`, whose `principal` gets the run's
`context` keyword), waits for the decision (long poll; none when policy decided at intake) and answers
the request: approved when Reviewer approved (the tool will run), rejected otherwise, with the
reviewer's reason beside the answer as text the model reads (the framework's own rejection result
carries no reason). Approval requests for tools it does not gate are left to the caller (the response
is returned with them pending). Pass a `session` to continue the conversation.
"""

from __future__ import annotations

from typing import Any

from agent_framework import Agent, AgentResponse, Content, FunctionTool, Message

from reviewer_gate.client import Approval, NotApproved, ReviewerClient, running_under
from reviewer_gate.describe import ToolDescription
from reviewer_gate.risk import risk_hint


def _argument_names(tool: FunctionTool) -> tuple[str, ...]:
    """The tool's arguments in its JSON schema's order."""
    return tuple((tool.parameters() or {}).get("properties") or {})


def _refusal_text(refusal: NotApproved) -> str:
    if refusal.code == "rejected":
        return f"Rejected by the reviewer: {refusal.reason or 'no reason given'}. Nothing was run."
    return f"Not approved ({refusal.code}): {refusal.reason}. Nothing was run."


class ReviewerApprovals:
    def __init__(
        self,
        client: ReviewerClient,
        *,
        principal: dict[str, Any] | None = None,
        agent_version: str = "agent-framework",
        decision_timeout: float | None = None,
    ):
        self.client = client
        self.principal = principal or {"id": "agent-framework", "display": "Agent Framework run"}
        self.agent_version = agent_version
        self.decision_timeout = decision_timeout
        self._gated: dict[str, tuple[FunctionTool, ToolDescription]] = {}
        self._released: dict[str, Approval] = {}  # call id -> verified, consumed, not yet used

    def gate(self, tool: FunctionTool, description: ToolDescription | None = None) -> FunctionTool:
        """Make `tool` ask Reviewer (the framework's approval request) and run only on a released
        approval; `description` says how its calls read for the reviewers (checked now against its schema)."""
        description = (description or ToolDescription()).checked(tool.name, _argument_names(tool))
        original = tool.invoke

        async def invoke_with_approval(*, tool_call_id: str | None = None, **options: Any) -> Any:
            released = self._released.pop(tool_call_id or "", None)  # single use
            if released is None:
                return f"{tool.name} was not approved by Reviewer for this call; nothing was run."
            options["arguments"] = released.action.get("arguments") or {}
            try:
                with running_under(released):  # the tool reads current_approval().idempotency_key
                    output = await original(tool_call_id=tool_call_id, **options)
            except Exception as error:
                await released.areport("unknown", detail=f"tool raised {error!r}"[:2000])
                raise
            await released.areport("succeeded")
            return output

        tool.invoke = invoke_with_approval  # type: ignore[method-assign]
        tool.approval_mode = "always_require"
        self._gated[tool.name] = (tool, description)
        return tool

    async def run(
        self,
        agent: Agent,
        input: Any = None,  # noqa: A002 - agent.run's name
        *,
        session: Any = None,
        context: Any = None,
        **run_options: Any,
    ) -> AgentResponse[Any]:
        """`agent.run`, answering the approval requests of gated tools with Reviewer until none is left;
        `context` is what a description's `principal` function gets (the run's user, say)."""
        session = session if session is not None else agent.create_session()
        response: AgentResponse[Any] = await agent.run(input, session=session, **run_options)
        while True:
            ours = [
                request
                for request in response.user_input_requests
                if request.type == "function_approval_request"
                and request.function_call is not None
                and request.function_call.name in self._gated
            ]
            if not ours:
                return response  # nothing pending, or approvals for tools this object does not gate
            answers: list[Content] = []
            for request in ours:
                answers.extend(await self._decide(request, context))
            response = await agent.run(Message(role="user", contents=answers), session=session, **run_options)

    async def _decide(self, request: Content, context: Any) -> list[Content]:
        """The answer to one approval request: approved (the approval is released to the tool), or
        rejected with the reason as text."""
        call = request.function_call
        assert call is not None  # run() passes only requests that name a gated call
        call_id, tool_name = str(call.call_id), str(call.name)
        tool, description = self._gated[tool_name]
        fields = description.request_fields(
            tool_name,
            dict(call.parse_arguments() or {}),
            tool_text=tool.description or "",
            argument_order=_argument_names(tool),
            context=context,
            default_principal=self.principal,
            effect=f"runs the tool {tool_name}",
        )
        fields["consequences"].setdefault("risk", risk_hint(tool_name) or "gated")
        try:
            approval = await self.client.arequest_approval(
                fields.pop("action"),
                **fields,
                task_id=f"agent-framework-{call_id}",
                agent_version=self.agent_version,
                timeout=self.decision_timeout,
            )
        except NotApproved as refusal:
            return self._rejected(request, tool_name, _refusal_text(refusal))
        if approval.action.get("tool") != (description.name or tool_name):
            await approval.areport("failed", detail="the approved action names another tool; nothing was run")
            why = "The approved action names another tool; nothing was run."
            return self._rejected(request, tool_name, why)
        self._released[call_id] = approval
        return [request.to_function_approval_response(approved=True)]

    @staticmethod
    def _rejected(request: Content, tool_name: str, why: str) -> list[Content]:
        answer = request.to_function_approval_response(approved=False)
        return [answer, Content.from_text(f"{tool_name}: {why}")]
