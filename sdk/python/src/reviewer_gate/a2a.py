"""Approval in an a2a-sdk `AgentExecutor` as one awaited call (extra `a2a`).

    approvals = A2AApprovals(client, SQLiteRequestStore("state/approvals.sqlite3"))

    class MyExecutor(AgentExecutor):
        async def execute(self, context, event_queue):
            released = await approvals.approval(context, event_queue, propose=self.build_request)
            if released is None:
                return                      # parked, refused, rejected, cancelled: nothing to do
            result = await do_it(released.action, idempotency_key=released.idempotency_key)
            await released.report("succeeded", transaction_id=result.id)
            await released.updater.complete()

`approval()` is re-entrant, the way an A2A task is: on the task's first message it calls `propose`
for the approval request, persists it, parks the task in TASK_STATE_AUTH_REQUIRED with the request in
the status message metadata and tells Reviewer (`POST /api/v1/proposals`, retried). When a policy
decides at intake, that POST's answer carries the signed decision and the same call goes on with it
at once (waiting at most `answer_wait` seconds for the answer, and telling Reviewer so with `Prefer:
decision-in-answer`, which holds Reviewer's continuation meanwhile); otherwise it returns None and
`execute()` returns. When Reviewer continues the task with the signed decision,
the SDK calls `execute()` again and the same call verifies the token (from the MESSAGE metadata)
against the persisted request, ends the task itself when the answer is no (REJECTED with the
reviewer's reason, FAILED with the gate's refusal, parked again with your answer to a question), and
for an approval consumes it right before returning a `Released`: the action to execute (a reviewer's
edit when there was one), its idempotency key and the task's updater. The task is WORKING then; ending
it is yours.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from a2a.helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Message, TaskState
from google.protobuf.json_format import MessageToDict

from reviewer_gate.a2a_push import RetryOverloaded as RetryOverloaded  # re-exported
from reviewer_gate.a2a_push import ReviewerPushSender as ReviewerPushSender  # re-exported
from reviewer_gate.client import ReviewerClient
from reviewer_gate.gate import (
    GateError,
    VerifiedDecision,
    approval_request_metadata,
    decision_token_from_metadata,
)
from reviewer_gate.request_store import AskedRequest, RequestStore
from reviewer_gate.request_store import SQLiteRequestStore as SQLiteRequestStore  # re-exported

logger = logging.getLogger(__name__)

ANSWER_WAIT_SECONDS = 2.0


@dataclass(frozen=True)
class Released:
    """An approval that was verified and consumed: execute `action` once, then `report` and end the task."""

    decision: VerifiedDecision
    action: dict[str, Any]
    asked: AskedRequest
    updater: TaskUpdater
    client: ReviewerClient = field(repr=False)

    @property
    def idempotency_key(self) -> str:
        return self.decision.jti

    async def report(
        self, status: str, *, transaction_id: str | None = None, detail: str | None = None
    ) -> bool:
        """Tell Reviewer how it ended ("succeeded" | "failed" | "unknown"); best effort."""
        return await asyncio.to_thread(
            self.client.gate.report_outcome,
            self.decision,
            status,
            transaction_id=transaction_id,
            detail=detail,
        )


def approvers_text(decision: VerifiedDecision) -> str:
    names = [str(a.get("name") or a.get("sub")) for a in decision.approvers if isinstance(a, dict)]
    return ", ".join(names) or "Reviewer"


def text_message(updater: TaskUpdater, text: str, metadata: dict[str, Any] | None = None) -> Message:
    return updater.new_agent_message([new_text_part(text)], metadata=metadata)


Propose = Callable[[RequestContext, TaskUpdater], Awaitable[dict[str, Any] | None]]
AnswerQuestion = Callable[[AskedRequest, VerifiedDecision], dict[str, Any] | None]
CanPerform = Callable[[dict[str, Any]], bool]
StillWanted = Callable[[RequestContext], Awaitable[bool]]


class A2AApprovals:
    """Ask Reviewer, wait parked, verify, consume: for the tasks of one a2a-sdk agent."""

    def __init__(
        self,
        client: ReviewerClient,
        store: RequestStore,
        *,
        announce: bool = True,
        answer_wait: float = ANSWER_WAIT_SECONDS,
    ):
        self.client = client
        self.gate = client.gate
        self.store = store
        self.announce = announce  # also POST the request (the push / reconciliation are the others)
        # How long a request waits for the announcement's answer before its task parks; the answer
        # carries the decision when a policy decides at intake (0: always park and wait for Reviewer).
        self.answer_wait = answer_wait
        self._announcing: set[asyncio.Task[str | None]] = set()

    async def approval(
        self,
        context: RequestContext,
        event_queue: EventQueue,
        *,
        propose: Propose,
        answer_question: AnswerQuestion | None = None,
        still_wanted: StillWanted | None = None,
        can_perform: CanPerform | None = None,
    ) -> Released | None:
        """The one call (see the module doc). Returns a Released only when the agent may act now.

        - `propose(context, updater)`: the approval request for a new task (`client.build_request`),
          or None after ending the task itself (e.g. `updater.reject` for an unreadable ask);
        - `answer_question(asked, decision)`: the request answering a reviewer's question (it must
          `supersede` the asked one); without it a question fails the task;
        - `still_wanted(context)`: False when the task was cancelled; checked right before consuming
          and again right after (then the consumed decision is reported failed); for a decision that
          needs no consume (`consume_online: false`), once, right before it is returned;
        - `can_perform(action)`: False refuses a reviewer's edit this agent cannot execute.
        """
        task = context.current_task
        if task is None:
            message, task_id, context_id = context.message, context.task_id, context.context_id
            if message is None or task_id is None or context_id is None:
                # The request handler names both for every message; without them nothing can be parked.
                raise ValueError("a new task needs the request's message, task id and context id")
            await event_queue.enqueue_event(new_task_from_user_message(message))
            updater = TaskUpdater(event_queue, task_id, context_id)
            request = await propose(context, updater)
            if request is None:
                return None
            decided = await self.park(updater, request)
            return await self._decided_at_intake(
                context, updater, decided, answer_question, still_wanted, can_perform
            )
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        if task.status.state != TaskState.TASK_STATE_AUTH_REQUIRED:
            # Only a parked task takes messages; anything else would be a second plan mid-execution.
            logger.info("message to task %s in %s ignored", task.id, TaskState.Name(task.status.state))
            return None
        return await self._receive(context, updater, answer_question, still_wanted, can_perform)

    async def park(
        self, updater: TaskUpdater, request: dict[str, Any], headline: str = "Approval required"
    ) -> tuple[AskedRequest, str] | None:
        """Persist the request, tell Reviewer, then park the task on it. The request names the client's
        registration (`agent`): Reviewer adopts a parked task it finds by ListTasks only into the
        registration it names. When a policy decided at intake, the announcement's answer carries the
        signed decision (within `answer_wait` seconds): then (the request as persisted, the decision)
        is returned and the task is not parked (a2a-sdk takes no further events from an execute() once
        its task is parked)."""
        request = self.client.stamped(request)
        await asyncio.to_thread(self.store.save_request, updater.task_id, updater.context_id, request)
        if self.announce and (token := await self._announce(updater.task_id, updater.context_id, request)):
            return AskedRequest(updater.task_id, updater.context_id, request), token
        await updater.requires_auth(
            text_message(updater, f"{headline}: {request['summary']}", approval_request_metadata(request))
        )
        logger.info(
            "task %s parked on request %s (%s)", updater.task_id, request["request_id"], request["summary"]
        )
        return None

    async def _announce(self, task_id: str, context_id: str, request: dict[str, Any]) -> str | None:
        """POST the request (best effort: the parked task is the source of truth), waiting up to
        `answer_wait` seconds for the answer's token; past that the POST goes on in the background."""

        async def post() -> str | None:
            try:
                # With answer_wait, a decision made at intake is acted on from this answer: Reviewer
                # holds the continuation meanwhile (and sends it only if the task has not started on it).
                submission = await asyncio.to_thread(
                    self.client.submit,
                    request,
                    task_id=task_id,
                    context_id=context_id,
                    decision_in_answer=self.answer_wait > 0,
                )
            except Exception as error:  # logged, never raised: Reviewer also learns by push or GetTask
                logger.warning("Reviewer not told about request %s: %s", request["request_id"], error)
                return None
            return submission.token

        background = asyncio.create_task(post(), name=f"proposal:{request['request_id']}")
        self._announcing.add(background)  # keep a reference, or the task may be collected mid-flight
        background.add_done_callback(self._announcing.discard)
        if self.answer_wait <= 0:
            return None
        done, _ = await asyncio.wait({background}, timeout=self.answer_wait)
        return background.result() if done else None

    async def _decided_at_intake(
        self,
        context: RequestContext,
        updater: TaskUpdater,
        decided: tuple[AskedRequest, str] | None,
        answer_question: AnswerQuestion | None,
        still_wanted: StillWanted | None,
        can_perform: CanPerform | None,
    ) -> Released | None:
        """What park() returned: None when the task parked; else policy decided the request at intake and
        the announcement's answer carried the signed decision: act on it now, as on a continuation,
        instead of waiting parked for Reviewer to send it. Reviewer's continuation then arrives as a
        repeat: verify() or Reviewer's single-use consume lets exactly one of the two deliveries act."""
        if decided is None:
            return None
        asked, token = decided
        return await self._decide(context, updater, asked, token, answer_question, still_wanted, can_perform)

    async def aclose(self) -> None:
        """Let announcements in flight finish (at most 5 s), then close the kept-alive connections."""
        if self._announcing:
            await asyncio.wait(self._announcing, timeout=5)
        close = getattr(self.client, "close", None)
        if close is not None:
            await asyncio.to_thread(close)

    async def _receive(
        self,
        context: RequestContext,
        updater: TaskUpdater,
        answer_question: AnswerQuestion | None,
        still_wanted: StillWanted | None,
        can_perform: CanPerform | None,
    ) -> Released | None:
        asked = await asyncio.to_thread(self.store.current_request, updater.task_id)
        if asked is None:
            await updater.failed(
                text_message(updater, "No approval request on record for this task; nothing was executed.")
            )
            return None
        metadata = MessageToDict(context.message.metadata) if context.message is not None else {}
        token = decision_token_from_metadata(metadata)
        if token is None:
            await updater.requires_auth(
                text_message(
                    updater,
                    f"Still waiting for approval: {asked.request['summary']}",
                    approval_request_metadata(asked.request),
                )
            )
            return None
        return await self._decide(context, updater, asked, token, answer_question, still_wanted, can_perform)

    async def _decide(
        self,
        context: RequestContext,
        updater: TaskUpdater,
        asked: AskedRequest,
        token: str,
        answer_question: AnswerQuestion | None,
        still_wanted: StillWanted | None,
        can_perform: CanPerform | None,
    ) -> Released | None:
        """Verify `token` against the request on record and end, park or release the task by it."""
        try:
            decision = await asyncio.to_thread(
                self.gate.verify,
                token,
                task_id=updater.task_id,
                request_id=asked.request_id,
                action_digest=asked.action_digest,
                context_id=asked.context_id,
                expires_at=asked.request.get("expires_at"),
            )
        except GateError as error:
            if error.code == "replayed":
                # verify() matched task, request and digest first: this is the same decision delivered
                # again (a retry, another replica). Whoever claimed it acts; this delivery does nothing.
                logger.info("task %s: duplicate delivery of decision; ignored", updater.task_id)
                return None
            logger.warning("task %s: decision refused: %s", updater.task_id, error)
            await updater.failed(
                text_message(
                    updater, f"Decision refused ({error.code}): {error.message}. Nothing was executed."
                )
            )
            return None

        if decision.decision == "rejected":
            reason = decision.reason or "no reason given"
            await updater.reject(text_message(updater, f"Rejected by {approvers_text(decision)}: {reason}"))
            return None
        if decision.decision == "needs_info":
            answer = answer_question(asked, decision) if answer_question else None
            if answer is None:
                await updater.failed(
                    text_message(
                        updater, f"Reviewer asked: {decision.reason}. Not answered; nothing was executed."
                    )
                )
                return None
            decided = await self.park(updater, answer, "Approval required (answered the reviewer's question)")
            return await self._decided_at_intake(
                context, updater, decided, answer_question, still_wanted, can_perform
            )
        return await self._release(context, updater, asked, decision, still_wanted, can_perform)

    async def _release(
        self,
        context: RequestContext,
        updater: TaskUpdater,
        asked: AskedRequest,
        decision: VerifiedDecision,
        still_wanted: StillWanted | None,
        can_perform: CanPerform | None,
    ) -> Released | None:
        if still_wanted is not None and not await still_wanted(context):
            await updater.cancel(text_message(updater, "Cancelled before acting; nothing was executed."))
            return None
        # A reviewer's edit releases the edited action the token carries, never the original.
        action = decision.action if decision.edited else asked.action
        if action is None or (can_perform is not None and not can_perform(action)):
            await updater.failed(
                text_message(
                    updater, "The approved action is not one this agent can perform; nothing was executed."
                )
            )
            return None
        summary = asked.request["summary"]
        await updater.start_work(
            text_message(updater, f"Approved by {approvers_text(decision)}; executing {summary}")
        )
        released = Released(
            decision=decision, action=action, asked=asked, updater=updater, client=self.client
        )
        if decision.consume:
            try:
                await asyncio.to_thread(self.gate.consume, decision)  # right before the side effect
            except GateError as error:
                await updater.failed(
                    text_message(
                        updater,
                        f"Reviewer did not release the decision ({error.code}): {error.message}. "
                        "Nothing was executed.",
                    )
                )
                return None
        # Checked again only after a consume: its round trip is the window a cancel may land in. Without
        # one, the check above was a moment ago, with nothing in between but the task's WORKING event.
        if decision.consume and still_wanted is not None and not await still_wanted(context):
            # Reviewer moved it to executing: settle it.
            await released.report("failed", detail="task cancelled before acting; nothing was executed")
            await updater.cancel(text_message(updater, "Cancelled before acting; nothing was executed."))
            return None
        return released
