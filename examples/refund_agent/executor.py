"""The refund agent's AgentExecutor: ask, wait, verify, consume, act once, report.

1. A new message: read the refund, persist the approval request, park the task in
   TASK_STATE_AUTH_REQUIRED with the request in the status message metadata, and tell Reviewer.
2. A message to the parked task: take the decision token from the MESSAGE metadata and verify it with
   the gate against the request persisted in step 1.
   - any GateError → FAILED, nothing executed;
   - rejected → REJECTED;
   - needs_info → park again with a new request that supersedes the old one (same action);
   - approved → consume (if asked) right before the side effect, refund with the decision's jti as
     idempotency key, report the outcome, COMPLETED with a "refund-receipt" artifact.
3. cancel(): CANCELED. A cancelled task never reaches the side effect: the flag is checked before
   consuming and again right before the refund. Once the refund has started it runs to the end
   (the money may already be moving), and the task ends with its real outcome.
"""

import asyncio
import logging

from a2a.helpers import get_message_text, new_data_part, new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskStore, TaskUpdater
from a2a.types import Message, TaskState
from google.protobuf.json_format import MessageToDict

from approvals import gate as approval_gate
from examples.refund_agent.payments import FAILED, SUCCEEDED, Refund, RefundOutcome, refund_settled
from examples.refund_agent.proposal import (
    UnreadableRequest,
    answer_request,
    build_approval_request,
    parse_refund_request,
    principal_from,
)
from examples.refund_agent.reviewer_client import ProposalPublisher
from examples.refund_agent.state import AgentState, AskedRequest

logger = logging.getLogger(__name__)

TERMINAL_STATES = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}
# How long cancel() waits for a refund already under way to settle before the SDK marks the task.
CANCEL_WAITS_FOR_REFUND_SECONDS = 60


def _text_message(updater: TaskUpdater, text: str, metadata: dict | None = None) -> Message:
    return updater.new_agent_message([new_text_part(text)], metadata=metadata)


def _approvers_text(decision: approval_gate.VerifiedDecision) -> str:
    names = [
        str(approver.get("name") or approver.get("sub"))
        for approver in decision.approvers
        if isinstance(approver, dict)
    ]
    return ", ".join(names) or "Reviewer"


class RefundExecutor(AgentExecutor):
    def __init__(
        self,
        *,
        gate: approval_gate.Gate,
        state: AgentState,
        payments,
        publisher: ProposalPublisher,
        task_store: TaskStore,
        approval_ttl_seconds: int,
    ):
        self.gate = gate
        self.state = state
        self.payments = payments
        self.publisher = publisher
        self.task_store = task_store
        self.approval_ttl_seconds = approval_ttl_seconds
        # Approved executions running in this process, by task id; cancel() waits for them.
        self._executions: dict[str, asyncio.Task] = {}
        # Seen at once by a running execution, before the database write of cancel() lands.
        self._cancelled: set[str] = set()

    # --- entry points ---------------------------------------------------------------------------

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            await self._ask_for_approval(context, event_queue)
            return
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        if task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED:
            await self._continue_with_decision(context, updater)
        else:
            # Only a parked task takes messages; anything else would be a second plan mid-execution.
            logger.info("message to task %s in %s ignored", task.id, TaskState.Name(task.status.state))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id
        self._cancelled.add(task_id)
        await asyncio.to_thread(self.state.mark_cancelled, task_id)
        running = self._executions.get(task_id)
        if running is not None:
            # The execution checks the flag before the side effect and ends the task itself: CANCELED
            # if it had not started the refund, else its real outcome.
            await asyncio.wait({running}, timeout=CANCEL_WAITS_FOR_REFUND_SECONDS)
            return
        task = context.current_task
        if task is not None and task.status.state not in TERMINAL_STATES:
            updater = TaskUpdater(event_queue, task.id, task.context_id)
            await updater.cancel(_text_message(updater, "Cancelled; nothing was executed."))

    # --- 1. ask ---------------------------------------------------------------------------------

    async def _ask_for_approval(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        await event_queue.enqueue_event(new_task_from_user_message(message))  # a Task before any update
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        try:
            ask = parse_refund_request(get_message_text(message))
        except UnreadableRequest as error:
            await updater.reject(_text_message(updater, f"Cannot prepare a refund: {error}."))
            return
        principal = principal_from(MessageToDict(message.metadata), context.metadata)
        refunded_before = await self.payments.refunded_total(ask.order_id, ask.currency)
        request = build_approval_request(
            ask, principal=principal, refunded_before=refunded_before, ttl_seconds=self.approval_ttl_seconds
        )
        await self._park(updater, request, "Approval required")

    async def _park(self, updater: TaskUpdater, request: dict, headline: str) -> None:
        """Persist the request, then park the task on it, then tell Reviewer (in that order)."""
        await asyncio.to_thread(self.state.save_request, updater.task_id, updater.context_id, request)
        await updater.requires_auth(
            _text_message(
                updater, f"{headline}: {request['summary']}", approval_gate.approval_request_metadata(request)
            )
        )
        self.publisher.publish(updater.task_id, updater.context_id, request)
        logger.info(
            "task %s parked on request %s (%s)", updater.task_id, request["request_id"], request["summary"]
        )

    # --- 2. verify ------------------------------------------------------------------------------

    async def _continue_with_decision(self, context: RequestContext, updater: TaskUpdater) -> None:
        asked = await asyncio.to_thread(self.state.current_request, updater.task_id)
        if asked is None:
            await updater.failed(
                _text_message(
                    updater,
                    "This agent has no record of an approval request for this task; nothing was executed.",
                )
            )
            return
        token = approval_gate.decision_token_from_metadata(MessageToDict(context.message.metadata))
        if token is None:
            await updater.requires_auth(
                _text_message(
                    updater,
                    f"Still waiting for approval: {asked.request['summary']}",
                    approval_gate.approval_request_metadata(asked.request),
                )
            )
            return
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
        except approval_gate.GateError as error:
            if error.code == "replayed":
                # verify() already matched the task, request and digest, so this is the same decision
                # delivered again (a retry, another replica): whoever claimed it first acts; this
                # delivery must neither act nor fail the task under the one that is acting.
                logger.info("task %s: duplicate delivery of decision; ignored", updater.task_id)
                return
            logger.warning("task %s: decision refused: %s", updater.task_id, error)
            await updater.failed(
                _text_message(
                    updater, f"Decision refused ({error.code}): {error.message}. Nothing was executed."
                )
            )
            return

        if decision.decision == "rejected":
            await updater.reject(
                _text_message(
                    updater,
                    f"Rejected by {_approvers_text(decision)}: {decision.reason or 'no reason given'}",
                )
            )
        elif decision.decision == "needs_info":
            await self._answer_question(updater, asked, decision)
        else:
            await self._execute_approved(context, updater, asked, decision)

    async def _answer_question(
        self, updater: TaskUpdater, asked: AskedRequest, decision: approval_gate.VerifiedDecision
    ) -> None:
        request = answer_request(
            asked.request, question=decision.reason, ttl_seconds=self.approval_ttl_seconds
        )
        await self._park(updater, request, "Approval required (answered the reviewer's question)")

    # --- 3. act ---------------------------------------------------------------------------------

    async def _execute_approved(
        self,
        context: RequestContext,
        updater: TaskUpdater,
        asked: AskedRequest,
        decision: approval_gate.VerifiedDecision,
    ) -> None:
        # Shielded: once started, an execution is not torn down halfway by the SDK cancelling this
        # coroutine; cancel() waits for it instead.
        execution = asyncio.ensure_future(self._run_approved(context, updater, asked, decision))
        self._executions[updater.task_id] = execution
        execution.add_done_callback(lambda _: self._executions.pop(updater.task_id, None))
        await asyncio.shield(execution)

    async def _was_cancelled(self, context: RequestContext) -> bool:
        task_id = context.task_id
        if task_id in self._cancelled or await asyncio.to_thread(self.state.is_cancelled, task_id):
            return True
        # Another replica may have written CANCELED to the shared task store without calling us.
        stored = await self.task_store.get(task_id, context.call_context)
        return stored is not None and stored.status.state == TaskState.TASK_STATE_CANCELED

    async def _journal(self, decision, asked: AskedRequest, phase: str, outcome: RefundOutcome | None = None):
        await asyncio.to_thread(
            self.state.record_execution,
            jti=decision.jti,
            task_id=asked.task_id,
            request_id=asked.request_id,
            idempotency_key=decision.jti,
            phase=phase,
            transaction_id=outcome.transaction_id if outcome else None,
            detail=outcome.detail if outcome else None,
        )

    async def _run_approved(
        self,
        context: RequestContext,
        updater: TaskUpdater,
        asked: AskedRequest,
        decision: approval_gate.VerifiedDecision,
    ) -> None:
        if await self._was_cancelled(context):
            await updater.cancel(_text_message(updater, "Cancelled before the refund; nothing was executed."))
            return
        await self._journal(decision, asked, "approved")
        await updater.start_work(
            _text_message(
                updater, f"Approved by {_approvers_text(decision)}; executing {asked.request['summary']}"
            )
        )

        if decision.consume:
            try:
                await asyncio.to_thread(self.gate.consume, decision)
            except approval_gate.GateError as error:
                await self._journal(decision, asked, FAILED, RefundOutcome(FAILED, detail=str(error)))
                await updater.failed(
                    _text_message(
                        updater,
                        f"Reviewer did not release the decision ({error.code}): {error.message}. "
                        "Nothing was executed.",
                    )
                )
                return

        if await self._was_cancelled(context):
            detail = "task cancelled before the refund; nothing was executed"
            await self._journal(decision, asked, FAILED, RefundOutcome(FAILED, detail=detail))
            if decision.consume:  # Reviewer moved it to executing: settle it
                await asyncio.to_thread(self.gate.report_outcome, decision, FAILED, detail=detail)
            await updater.cancel(_text_message(updater, "Cancelled before the refund; nothing was executed."))
            return

        # Point of no return: the frozen action exactly as approved: what this agent asked for, or,
        # when a reviewer edited it, the edited action the signed decision carries (same tool only).
        approved_action = decision.action if decision.edited else asked.action
        if approved_action is None or approved_action.get("tool") != asked.action["tool"]:
            detail = "the approved action is not one this agent can perform; nothing was executed"
            await self._journal(decision, asked, FAILED, RefundOutcome(FAILED, detail=detail))
            if decision.consume:
                await asyncio.to_thread(self.gate.report_outcome, decision, FAILED, detail=detail)
            await updater.failed(_text_message(updater, detail))
            return
        arguments = approved_action["arguments"]
        refund = Refund(
            idempotency_key=decision.jti,
            order_id=arguments["order_id"],
            amount=arguments["amount"],
            currency=arguments["currency"],
        )
        await self._journal(decision, asked, "executing")

        async def report_unknown(outcome: RefundOutcome) -> None:
            await self._journal(decision, asked, "unknown", outcome)
            await asyncio.to_thread(self.gate.report_outcome, decision, "unknown", detail=outcome.detail)
            await updater.start_work(
                _text_message(
                    updater, "The payments service's answer was lost; reconciling by idempotency key."
                )
            )

        outcome = await refund_settled(self.payments, refund, on_unknown=report_unknown)
        await self._finish(updater, asked, decision, refund, outcome)

    async def _finish(
        self, updater: TaskUpdater, asked: AskedRequest, decision, refund: Refund, outcome: RefundOutcome
    ) -> None:
        """Record the authoritative result first, then tell Reviewer, then end the task."""
        await self._journal(decision, asked, outcome.status, outcome)
        if outcome.status == SUCCEEDED:
            await asyncio.to_thread(
                self.gate.report_outcome, decision, SUCCEEDED, transaction_id=outcome.transaction_id
            )
            receipt = {
                "transaction_id": outcome.transaction_id,
                "idempotency_key": refund.idempotency_key,
                "decision_id": decision.jti,
                "request_id": asked.request_id,
                **refund.body(),
            }
            await updater.add_artifact(
                [
                    new_data_part(receipt, media_type="application/json"),
                    new_text_part(
                        f"Refunded {refund.currency} {refund.amount} for order {refund.order_id}: "
                        f"transaction {outcome.transaction_id}"
                    ),
                ],
                name="refund-receipt",
            )
            await updater.complete(
                _text_message(updater, f"Refund done: transaction {outcome.transaction_id}")
            )
        elif outcome.status == FAILED:
            await asyncio.to_thread(self.gate.report_outcome, decision, FAILED, detail=outcome.detail)
            await updater.failed(_text_message(updater, f"Refund failed: {outcome.detail}"))
        else:
            # Not "failed": the refund may have happened. Reviewer keeps it unknown; a person reconciles.
            await updater.failed(
                _text_message(
                    updater,
                    f"Refund outcome unknown ({outcome.detail}); reconcile with the payments service "
                    f"using idempotency key {refund.idempotency_key}. Do not approve it again.",
                )
            )
