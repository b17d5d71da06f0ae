"""Reviewer in a LangGraph graph: a tool node that turns gated tool calls into proposals and pauses the
graph with `interrupt()` until the signed decision arrives (extra `langgraph`).

    node = ReviewedToolNode([refund, lookup_order], client, gated=["refund"],
                            descriptions={"refund": ToolDescription(name="payments.refund", currency="EUR")})
    builder.add_node("tools", node)                      # where a ToolNode would go
    graph = builder.compile(checkpointer=SqliteSaver(...))   # interrupts need a checkpointer

    state = graph.invoke(inputs, config)                 # pauses on a gated call
    while pending := pending_approvals(graph, config):   # [{"proposal_id", ...} or {"members": [...]}]
        state = resume_with_decisions(graph, config, client)   # long-polls Reviewer, then resumes

For each tool call of the last AI message, the node runs an ungated tool at once; for a gated one it
submits the call as a proposal (the tool and its arguments are the action, described for the reviewers by
the tool's `ToolDescription`, reviewer_gate/describe.py, or by defaults from the tool's own description
and schema) and calls `interrupt()` with the proposal's id. When policy decided at intake (allowed or
denied) the intake answer carries the decision and the node does not interrupt. The graph resumes with
the decision token (`Command(resume=...)`, what `resume_with_decisions` sends); the node then verifies it
with the gate against the request IT built (the resume value is only a carrier: a forged or replayed
token is refused), consumes it, runs the tool once with the approved arguments (a reviewer's edit when
there was one; inside the tool, `reviewer_gate.current_approval().idempotency_key` is the key to send
downstream) and reports the outcome. A rejection, an expiry or any refusal becomes the tool's message
instead: the model reads why.

On resume LangGraph re-runs the node from its start, so the request is deterministic (its ids derive
from the thread id and the tool call id, it carries no expiry) and submitting it again answers the
same proposal.

Parallel tool calls: when the AI message asks for two or more gated calls, the node asks about them as
one batch (docs/agents/batches.md: one page, one vote, each member its own decision), pauses once for
all of them (the interrupt's `members`), and runs each approved member once. When Reviewer will not
batch them (`not_batchable`, `batch_too_large`, `batch_over_total`: a policy without a `batch` rule)
each is its own proposal, still with one pause for all. The batch's task and id derive from the thread
and the calls' ids, so the re-run on resume answers the same batch.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, ToolCall, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.types import Command, interrupt

from reviewer_gate.client import (
    NOT_AS_A_BATCH,
    BatchRefused,
    NotApproved,
    ReviewerClient,
    Submission,
    build_request,
    running_under,
)
from reviewer_gate.describe import ToolDescription
from reviewer_gate.risk import GatingRules, risk_hint

INTERRUPT_KIND = "reviewer_approval"
_NAMESPACE = uuid.UUID("5b0c7c3e-31a4-4f4e-9d8e-6c1f0a6f2a10")  # request ids of this adapter


class ReviewedToolNode:
    """A graph node (callable on a `{"messages": [...]}` state) that runs tools with Reviewer's approval."""

    def __init__(
        self,
        tools: Sequence[BaseTool],
        client: ReviewerClient,
        *,
        gated: Iterable[str] = (),
        open: Iterable[str] = (),  # noqa: A002 - the name the other adapters use
        use_risk_hint: bool = True,
        principal: dict[str, Any] | None = None,
        agent_version: str = "langgraph",
        descriptions: Mapping[str, ToolDescription] | None = None,
    ):
        self.tools = {tool.name: tool for tool in tools}
        self.client = client
        self.rules = GatingRules.of(gated, open, use_risk_hint)
        self.principal = principal or {"id": "langgraph", "display": "LangGraph graph"}
        self.agent_version = agent_version
        unknown = sorted(set(descriptions or {}) - set(self.tools))
        if unknown:
            raise ValueError(f"descriptions name tools this node does not run: {', '.join(unknown)}")
        # Checked now against each tool's arguments, so a bad template fails here, not at a call.
        self.descriptions = {
            name: description.checked(name, tuple(self.tools[name].args))
            for name, description in (descriptions or {}).items()
        }

    def __call__(self, state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        message = state["messages"][-1]
        calls = message.tool_calls if isinstance(message, AIMessage) else []
        thread = str((config.get("configurable") or {}).get("thread_id") or "no-thread")
        gated = [call for call in calls if call["name"] in self.tools and self.rules.is_gated(call["name"])]
        # Before any tool runs: the batch may pause the node, which runs again from its start on resume.
        decided = self._batch(gated, thread, config) if len(gated) > 1 else {}
        return {
            "messages": [
                decided[str(call["id"])](call)
                if str(call["id"]) in decided
                else self._run(call, thread, config)
                for call in calls
            ]
        }

    def _run(self, call: ToolCall, thread: str, config: RunnableConfig) -> ToolMessage:
        tool = self.tools.get(call["name"])
        if tool is None:
            return ToolMessage(f"Unknown tool {call['name']!r}.", tool_call_id=call["id"], status="error")
        if not self.rules.is_gated(tool.name):
            return ToolMessage(str(tool.invoke(call["args"], config)), tool_call_id=call["id"])
        return self._run_approved(tool, call, thread, config)

    def _request(self, tool: BaseTool, call: ToolCall, thread: str, config: RunnableConfig) -> dict[str, Any]:
        """The approval request of one call; its id derives from the thread and the call's id."""
        key = str(uuid.uuid5(_NAMESPACE, f"{thread}/{call['id']}"))
        fields = self.descriptions.get(tool.name, ToolDescription()).request_fields(
            tool.name,
            call["args"],
            tool_text=tool.description,
            argument_order=tuple(tool.args),
            context=config,
            default_principal=self.principal,
            effect=f"runs the tool {tool.name}",
        )
        fields["consequences"].setdefault("risk", risk_hint(tool.name) or "gated")
        return build_request(**fields, agent_version=self.agent_version, request_id=f"langgraph-{key}")

    def _batch(self, calls: list[ToolCall], thread: str, config: RunnableConfig) -> dict[str, Any]:
        """Ask about several gated calls as one batch (each alone when Reviewer will not batch them),
        pause once for those people decide, and return, by call id, what answers each (a function of
        the call giving its ToolMessage)."""
        requests = [self._request(self.tools[call["name"]], call, thread, config) for call in calls]
        key = str(uuid.uuid5(_NAMESPACE, f"{thread}/batch/" + "/".join(str(call["id"]) for call in calls)))
        try:
            # Submitting again (the node re-runs on resume) answers the same batch.
            submissions = self.client.submit_batch(
                requests,
                batch_id=f"langgraph-{key}",
                summary=f"{len(calls)} tool calls of one step",
                task_id=f"langgraph-{key}",
                context_id=thread,
            )
        except BatchRefused as refused:
            if refused.code not in NOT_AS_A_BATCH:
                raise
            # Each its own proposal, still one pause: a node paused once per call would, on each
            # resume, run again the calls already released.
            submissions = [
                self.client.submit(request, task_id=request["request_id"], context_id=thread)
                for request in requests
            ]
        waiting = [
            (call, submission)
            for call, submission in zip(calls, submissions, strict=True)
            if not submission.token
        ]
        resumed: dict[str, Any] = {}
        if waiting:
            value = interrupt(
                {
                    "kind": INTERRUPT_KIND,
                    "batch": f"langgraph-{key}",
                    "summary": f"{len(calls)} tool calls of one step",
                    "members": [
                        {
                            "proposal_id": submission.proposal_id,
                            "tool_call_id": call["id"],
                            "summary": submission.request["summary"],
                            "action": submission.request["action"],
                        }
                        for call, submission in waiting
                    ],
                }
            )
            given_all = value.get("members") if isinstance(value, dict) else None
            resumed = given_all if isinstance(given_all, dict) else {}
        answers: dict[str, Any] = {}
        for call, submission in zip(calls, submissions, strict=True):
            given = resumed.get(submission.proposal_id) or {}
            token = submission.token or (given.get("token") if isinstance(given, dict) else None)
            refusal = given.get("refusal") if isinstance(given, dict) else None
            answers[str(call["id"])] = self._answer(
                self.tools[call["name"]], submission, token, refusal, config
            )
        return answers

    def _answer(
        self,
        tool: BaseTool,
        submission: Submission,
        token: str | None,
        refusal: str | None,
        config: RunnableConfig,
    ) -> Any:
        """What runs a batch member's call once its decision is known (in the message's order)."""

        def run(call: ToolCall) -> ToolMessage:
            if not token:
                reason = "the graph resumed without a decision"
                return self._refused(call, NotApproved(refusal or "no_decision", reason))
            return self._release_and_run(tool, call, submission, token, config)

        return run

    def _run_approved(
        self, tool: BaseTool, call: ToolCall, thread: str, config: RunnableConfig
    ) -> ToolMessage:
        request = self._request(tool, call, thread, config)
        key = request["request_id"].removeprefix("langgraph-")
        # Submitting again (the node re-runs on resume) answers the same proposal.
        submission = self.client.submit(request, task_id=f"langgraph-{key}", context_id=thread)
        token = submission.token  # policy decided at intake: no pause
        if not token:
            resumed = interrupt(
                {
                    "kind": INTERRUPT_KIND,
                    "proposal_id": submission.proposal_id,
                    "tool_call_id": call["id"],
                    "summary": request["summary"],
                    "action": request["action"],
                }
            )
            token = resumed.get("token") if isinstance(resumed, dict) else None
            refusal = resumed.get("refusal") if isinstance(resumed, dict) else None
            if not token:
                return self._refused(
                    call, NotApproved(refusal or "no_decision", "the graph resumed without a decision")
                )
        return self._release_and_run(tool, call, submission, token, config)

    def _release_and_run(
        self, tool: BaseTool, call: ToolCall, submission: Submission, token: str, config: RunnableConfig
    ) -> ToolMessage:
        """Verify the decision against the request this node built, consume it, run the tool once."""
        request = submission.request
        try:
            approval = self.client.release(submission, token)
        except NotApproved as error:
            return self._refused(call, error)
        if approval.action.get("tool") != request["action"]["tool"]:
            approval.report("failed", detail="the approved action names another tool; nothing was run")
            return ToolMessage(
                "The approved action names another tool; nothing was run.",
                tool_call_id=call["id"],
                status="error",
            )
        try:
            with running_under(approval):  # the tool reads current_approval().idempotency_key
                output = tool.invoke(approval.action.get("arguments") or {}, config)
        except Exception as error:
            approval.report("unknown", detail=f"tool raised {error!r}"[:2000])
            raise
        approval.report("succeeded")
        return ToolMessage(
            str(output),
            tool_call_id=call["id"],
            artifact={"decision_id": approval.idempotency_key, "edited": approval.edited},
        )

    @staticmethod
    def _refused(call: ToolCall, refusal: NotApproved) -> ToolMessage:
        if refusal.code == "rejected":
            text = f"Rejected by the reviewer: {refusal.reason or 'no reason given'}. Nothing was run."
        else:
            text = f"Not approved ({refusal.code}): {refusal.reason}. Nothing was run."
        return ToolMessage(text, tool_call_id=call["id"], status="error")


def pending_approvals(graph: Any, config: RunnableConfig) -> list[dict[str, Any]]:
    """The Reviewer approvals the paused graph waits for (the interrupt values of this adapter)."""
    snapshot = graph.get_state(config)
    return [
        interruption.value
        for interruption in snapshot.interrupts
        if isinstance(interruption.value, dict) and interruption.value.get("kind") == INTERRUPT_KIND
    ]


def resume_with_decisions(
    graph: Any, config: RunnableConfig, client: ReviewerClient, *, timeout: float | None = None
) -> Any:
    """Wait for each pending approval's decision (long poll), then resume the graph with the tokens
    (for a batch's interrupt, every member's, by proposal id).

    Proposals that closed without a decision (expired, cancelled) resume with their state as
    `refusal`, so the node answers the model instead of waiting forever.
    """
    snapshot = graph.get_state(config)
    resume: dict[str, Any] = {}
    for interruption in snapshot.interrupts:
        value = interruption.value
        if not (isinstance(value, dict) and value.get("kind") == INTERRUPT_KIND):
            continue
        if "members" in value:  # a batch: every member's decision, by proposal id
            resume[interruption.id] = {
                "members": {
                    member["proposal_id"]: _wait(client, member["proposal_id"], timeout)
                    for member in value["members"]
                }
            }
            continue
        try:
            token = client.wait_for_proposal(value["proposal_id"], timeout=timeout)
            resume[interruption.id] = {"token": token}
        except NotApproved as closed:
            resume[interruption.id] = {"refusal": closed.code}
    return graph.invoke(Command(resume=resume), config)


def _wait(client: ReviewerClient, proposal_id: str, timeout: float | None) -> dict[str, Any]:
    try:
        return {"token": client.wait_for_proposal(proposal_id, timeout=timeout)}
    except NotApproved as closed:
        return {"refusal": closed.code}
