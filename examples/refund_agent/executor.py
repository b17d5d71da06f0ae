"""The refund agent's AgentExecutor, on `reviewer_gate.a2a.A2AApprovals`.

The approval itself is one awaited call (`approvals.approval`): a new message is read into a refund and
its approval request (`_propose`), persisted, and the task parked in TASK_STATE_AUTH_REQUIRED; the
continuation's decision is verified against that request, a rejection or refusal ends the task, a
question is answered with a new request that supersedes the old one (`_answer_question`), and an
approval is consumed right before it is returned. What stays here is the refund agent's own part:

- the refund, exactly as released, with the decision's jti as idempotency key; the outcome reported,
  COMPLETED with a "refund-receipt" artifact; a lost response reconciled by key, never re-approved;
- cancel(): CANCELED. The flag is checked right before consuming and right after (`_still_wanted`), so
  a cancelled task never refunds; once the refund has started it runs to the end (the money may
  already be moving) and the task ends with its real outcome.
"""

import asyncio
import logging

from a2a.helpers import get_message_text, new_data_part, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskStore, TaskUpdater
from a2a.types import TaskState
from google.protobuf.json_format import MessageToDict

from examples.refund_agent.payments import FAILED, SUCCEEDED, Refund, RefundOutcome, refund_settled
from examples.refund_agent.proposal import (
    REFUND_TOOL,
    UnreadableRequest,
    answer_request,
    build_approval_request,
    parse_refund_request,
    principal_from,
)
from examples.refund_agent.state import AgentState
from reviewer_gate.a2a import A2AApprovals, AskedRequest, Released, text_message
from reviewer_gate.gate import VerifiedDecision

logger = logging.getLogger(__name__)

TERMINAL_STATES = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}
# How long cancel() waits for a refund already under way to settle before the SDK marks the task.
CANCEL_WAITS_FOR_REFUND_SECONDS = 60


class RefundExecutor(AgentExecutor):
    def __init__(
        self,
        *,
        approvals: A2AApprovals,
        state: AgentState,
        payments,
        task_store: TaskStore,
        approval_ttl_seconds: int,
    ):
        self.approvals = approvals
        self.state = state
        self.payments = payments
        self.task_store = task_store
        self.approval_ttl_seconds = approval_ttl_seconds
        # Approved executions running in this process, by task id; cancel() waits for them.
        self._executions: dict[str, asyncio.Task] = {}
        # Seen at once by a running execution, before the database write of cancel() lands.
        self._cancelled: set[str] = set()

    # --- entry points ---------------------------------------------------------------------------

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        released = await self.approvals.approval(
            context,
            event_queue,
            propose=self._propose,
            answer_question=self._answer_question,
            still_wanted=self._still_wanted,
            can_perform=lambda action: action.get("tool") == REFUND_TOOL,
        )
        if released is not None:
            # Shielded: once started, an execution is not torn down halfway by the SDK cancelling this
            # coroutine; cancel() waits for it instead.
            execution = asyncio.ensure_future(self._refund(released))
            self._executions[context.task_id] = execution
            execution.add_done_callback(lambda _: self._executions.pop(context.task_id, None))
            await asyncio.shield(execution)

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
            await updater.cancel(text_message(updater, "Cancelled; nothing was executed."))

    # --- what the refund agent decides itself -------------------------------------------------

    async def _propose(self, context: RequestContext, updater: TaskUpdater) -> dict | None:
        """The approval request for a new message, or None after rejecting an unreadable one."""
        try:
            ask = parse_refund_request(get_message_text(context.message))
        except UnreadableRequest as error:
            await updater.reject(text_message(updater, f"Cannot prepare a refund: {error}."))
            return None
        principal = principal_from(MessageToDict(context.message.metadata), context.metadata)
        refunded_before = await self.payments.refunded_total(ask.order_id, ask.currency)
        return build_approval_request(
            ask, principal=principal, refunded_before=refunded_before, ttl_seconds=self.approval_ttl_seconds
        )

    def _answer_question(self, asked: AskedRequest, decision: VerifiedDecision) -> dict:
        return answer_request(asked.request, question=decision.reason, ttl_seconds=self.approval_ttl_seconds)

    async def _still_wanted(self, context: RequestContext) -> bool:
        """False once the task was cancelled: here, by another process of this agent, or in the store."""
        task_id = context.task_id
        if task_id in self._cancelled or await asyncio.to_thread(self.state.is_cancelled, task_id):
            return False
        # Another replica may have written CANCELED to the shared task store without calling us.
        stored = await self.task_store.get(task_id, context.call_context)
        return stored is None or stored.status.state != TaskState.TASK_STATE_CANCELED

    async def _journal(self, released: Released, phase: str, outcome: RefundOutcome | None = None):
        await asyncio.to_thread(
            self.state.record_execution,
            jti=released.decision.jti,
            task_id=released.asked.task_id,
            request_id=released.asked.request_id,
            idempotency_key=released.idempotency_key,
            phase=phase,
            transaction_id=outcome.transaction_id if outcome else None,
            detail=outcome.detail if outcome else None,
        )

    async def _refund(self, released: Released) -> None:
        """Point of no return: the approved action exactly as released, with the decision id as key."""
        arguments = released.action["arguments"]
        refund = Refund(
            idempotency_key=released.idempotency_key,
            order_id=arguments["order_id"],
            amount=arguments["amount"],
            currency=arguments["currency"],
        )
        await self._journal(released, "executing")

        async def report_unknown(outcome: RefundOutcome) -> None:
            await self._journal(released, "unknown", outcome)
            await released.report("unknown", detail=outcome.detail)
            await released.updater.start_work(
                text_message(
                    released.updater,
                    "The payments service's answer was lost; reconciling by idempotency key.",
                )
            )

        outcome = await refund_settled(self.payments, refund, on_unknown=report_unknown)
        await self._finish(released, refund, outcome)

    async def _finish(self, released: Released, refund: Refund, outcome: RefundOutcome) -> None:
        """Record the authoritative result first, then tell Reviewer, then end the task."""
        updater = released.updater
        await self._journal(released, outcome.status, outcome)
        if outcome.status == SUCCEEDED:
            await released.report(SUCCEEDED, transaction_id=outcome.transaction_id)
            receipt = {
                "transaction_id": outcome.transaction_id,
                "idempotency_key": refund.idempotency_key,
                "decision_id": released.decision.jti,
                "request_id": released.asked.request_id,
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
                text_message(updater, f"Refund done: transaction {outcome.transaction_id}")
            )
        elif outcome.status == FAILED:
            await released.report(FAILED, detail=outcome.detail)
            await updater.failed(text_message(updater, f"Refund failed: {outcome.detail}"))
        else:
            # Not "failed": the refund may have happened. Reviewer keeps it unknown; a person reconciles.
            await updater.failed(
                text_message(
                    updater,
                    f"Refund outcome unknown ({outcome.detail}); reconcile with the payments service "
                    f"using idempotency key {refund.idempotency_key}. Do not approve it again.",
                )
            )
