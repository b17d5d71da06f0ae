"""CrewAI tools that run only on Reviewer's approval (extra `crewai`).

    approvals = ReviewerTools(client, principal={"id": "u-7", "display": "Casey"})
    refund_tool = approvals.gate(refund, ToolDescription(name="payments.refund", currency="EUR"))
    agent = Agent(role="refunds", goal=..., backstory=..., llm=..., tools=[refund_tool, lookup_order])
    Crew(agents=[agent], tasks=[task]).kickoff()               # unchanged

`gate(tool)` takes a CrewAI tool (`@tool`, a `BaseTool`) or a plain function (made a tool as CrewAI's
`@tool` would) and returns a `BaseTool` in its place, with its name, description and arguments. A
call of it is the approval: it submits the call as a proposal (described by the `ToolDescription`,
whose `principal` gets this object's `context`), waits for the decision (long poll; none when policy
decided at intake), verifies and consumes it, then runs the tool with the approved arguments (a
reviewer's edit when there was one), once, and reports the outcome; inside the tool,
`reviewer_gate.current_approval().idempotency_key` is the key to send downstream. A refusal is what
the model reads (the reviewer's reason), and nothing runs.

Why a tool and not CrewAI's `before_tool_call` hook: hooks are global to the process, a blocked call
tells the model only "blocked by hook", and the tool is where the act happens, so the tool is where
the approval is checked. CrewAI has no pause for a pending approval, so the call blocks its thread
while a person decides (as CrewAI's own human-input prompt does); `decision_timeout` bounds the wait.

CrewAI answers a repeated call from its tool cache and calls a tool again when it raised. A gated
tool's results are never cached (every call is a proposal of its own), and a tool that raised after
its approval was consumed is reported `unknown` and answers the model instead of raising: CrewAI's
retry would otherwise ask for a second approval of an action that may have happened.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, cast

from crewai.tools import BaseTool
from crewai.tools import tool as crewai_tool
from crewai.tools.structured_tool import CrewStructuredTool
from pydantic import PrivateAttr

from reviewer_gate.client import Approval, NotApproved, ReviewerClient, running_under
from reviewer_gate.describe import ToolDescription
from reviewer_gate.risk import risk_hint

# CrewAI rewrites a tool's description as "Tool Name: ...\nTool Arguments: ...\nTool Description: <the
# text>"; a reviewer reads the text, and the wrapping tool gets it back to be rewritten once.
_DESCRIBED = "Tool Description: "


def _own_text(tool: BaseTool) -> str:
    return tool.description.split(_DESCRIBED, 1)[-1].strip()


def _refusal_text(refusal: NotApproved) -> str:
    if refusal.code == "rejected":
        return f"Rejected by the reviewer: {refusal.reason or 'no reason given'}. Nothing was run."
    return f"Not approved ({refusal.code}): {refusal.reason}. Nothing was run."


def _never_cached(_arguments: Any = None, _result: Any = None) -> bool:
    return False


class ReviewedTool(BaseTool):
    """The tool an agent is given in place of a gated one: each call asks Reviewer first."""

    _gated: BaseTool = PrivateAttr()
    _approvals: ReviewerTools = PrivateAttr()
    _description: ToolDescription = PrivateAttr()
    _argument_names: tuple[str, ...] = PrivateAttr()

    def __init__(self, gated: BaseTool, approvals: ReviewerTools, description: ToolDescription | None):
        arguments = tuple(gated.args_schema.model_fields)
        super().__init__(
            name=gated.name,
            description=_own_text(gated),
            args_schema=gated.args_schema,
            result_as_answer=gated.result_as_answer,
            max_usage_count=gated.max_usage_count,
            cache_function=_never_cached,
        )
        self._gated = gated
        self._approvals = approvals
        self._description = (description or ToolDescription()).checked(gated.name, arguments)
        self._argument_names = arguments

    def to_structured_tool(self) -> CrewStructuredTool:
        structured = super().to_structured_tool()
        # CrewAI's tool usage asks the tool it runs, this one, whether to cache: never, so that a repeated
        # call is a proposal of its own (the cache would answer it with an earlier call's outcome).
        structured.cache_function = _never_cached  # type: ignore[attr-defined]
        return structured

    def _run(self, **arguments: Any) -> Any:
        """One call: ask, and run the gated tool only on a verified, consumed approval."""
        approvals, description = self._approvals, self._description
        fields = description.request_fields(
            self.name,
            arguments,
            tool_text=_own_text(self),
            argument_order=self._argument_names,
            context=approvals.context,
            default_principal=approvals.principal,
            effect=f"runs the tool {self.name}",
        )
        fields["consequences"].setdefault("risk", risk_hint(self.name) or "gated")
        try:
            approval = approvals.client.request_approval(
                fields.pop("action"),
                **fields,
                task_id=f"crewai-{uuid.uuid4()}",  # CrewAI gives a call no id of its own
                agent_version=approvals.agent_version,
                timeout=approvals.decision_timeout,
            )
        except NotApproved as refusal:
            return _refusal_text(refusal)
        if approval.action.get("tool") != (description.name or self.name):
            approval.report("failed", detail="the approved action names another tool; nothing was run")
            return "The approved action names another tool; nothing was run."
        return self._run_once(approval)

    def _run_once(self, approval: Approval) -> Any:
        try:
            with running_under(approval):  # the tool reads current_approval().idempotency_key
                output = self._gated.run(**dict(approval.action.get("arguments") or {}))
        except Exception as error:
            approval.report("unknown", detail=f"tool raised {error!r}"[:2000])
            return (
                f"{self.name} raised {error!r} after it was approved; whether it acted is unknown, and "
                "it must not be called again for this: look it up by its idempotency key."
            )
        approval.report("succeeded")
        return output


class ReviewerTools:
    def __init__(
        self,
        client: ReviewerClient,
        *,
        principal: dict[str, Any] | None = None,
        context: Any = None,
        agent_version: str = "crewai",
        decision_timeout: float | None = None,
    ):
        """`principal` is whom the calls act for unless a description's `principal` function says,
        given `context` (the run's user, say: make one ReviewerTools per run to name each run's)."""
        self.client = client
        self.principal = principal or {"id": "crewai", "display": "CrewAI run"}
        self.context = context
        self.agent_version = agent_version
        self.decision_timeout = decision_timeout

    def gate(
        self, tool: BaseTool | Callable[..., Any], description: ToolDescription | None = None
    ) -> ReviewedTool:
        """A tool in place of `tool` that asks Reviewer before each call; `description` says how its
        calls read for the reviewers (checked now against the tool's arguments)."""
        # CrewAI's `tool` is typed as returning a Callable; given a function, it returns its Tool.
        gated = tool if isinstance(tool, BaseTool) else cast(BaseTool, crewai_tool(tool))
        return ReviewedTool(gated, self, description)
