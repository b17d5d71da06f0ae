"""A real a2a-sdk agent on loopback that speaks a2a-rust's approval extension: the book's refund
executor (book/src/deployment/oversight.md, "Asking before acting") behind a port of a2a-rust's
ApprovalGate.check (crates/a2a-protocol-server/src/approval.rs, commit 1acb212b), so a continuation is
admitted exactly when a2a-rust's gate would admit it.

The executor parks each new task in input-required with the request on the status message; the gate
then admits a decision only if it answers the request pending on the task, echoes its digest, and comes
from an authenticated caller the gate allows (bearer tokens labelled as a2a-rust's
BearerTokenAuthInterceptor::with_labelled_tokens labels them, `bearer:<label>`), not the requester.
"""

import uuid
from dataclasses import dataclass, field

from a2a.helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import AgentCapabilities, AgentExtension, TaskState
from google.protobuf.json_format import MessageToDict

from tests.approvals.a2a_rust_shapes import EXTENSION_URI, METADATA_KEY, REFUND_QUESTION, refund_request
from tests.approvals.fake_agent import FakeAgent


@dataclass
class Admitted:
    task_id: str
    approver: str
    decision: dict
    metadata: dict  # the whole continuation's metadata (Reviewer's token is beside the decision)


@dataclass
class RustRefunds(AgentExecutor):
    tokens: dict  # bearer token → label
    approvers: set  # allowed identities, e.g. {"bearer:reviewer"}
    with_action: bool = True
    agent: str = ""
    admitted: list[Admitted] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    requests: list[dict] = field(default_factory=list)

    def caller(self, context: RequestContext) -> str | None:
        headers = context.call_context.state.get("headers", {}) if context.call_context else {}
        scheme, _, token = headers.get("authorization", "").partition(" ")
        label = self.tokens.get(token) if scheme.lower() == "bearer" else None
        return f"bearer:{label}" if label else None

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task, message = context.current_task, context.message
        assert message is not None and context.task_id is not None and context.context_id is not None
        if task is None:  # first run: ask, and stop here
            await event_queue.enqueue_event(new_task_from_user_message(message))
            updater = TaskUpdater(event_queue, context.task_id, context.context_id)
            request = refund_request(
                requested_by=self.caller(context), with_action=self.with_action, agent=self.agent
            )
            self.requests.append(request)
            ask = updater.new_agent_message(
                [new_text_part(REFUND_QUESTION)], metadata={METADATA_KEY: request}
            )
            ask.extensions.append(EXTENSION_URI)
            await updater.update_status(TaskState.TASK_STATE_INPUT_REQUIRED, message=ask)
            return
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        metadata = MessageToDict(message.metadata)
        decision = metadata.get(METADATA_KEY) or {}
        why = self.refusal(task, decision, context)
        if why:
            self.refused.append(why)
            await updater.failed(updater.new_agent_message([new_text_part(why)]))
            return
        self.admitted.append(Admitted(task.id, self.caller(context) or "", decision, metadata))
        if decision["decision"] == "approve":
            await updater.complete(updater.new_agent_message([new_text_part("refunded")]))
        else:
            await updater.reject(updater.new_agent_message([new_text_part("not refunded")]))

    def refusal(self, task, decision, context) -> str:
        """ApprovalGate::check, in its order: a pending request on the task, the same request id, the
        same digest, an authenticated approver, an allowed one, not the requester."""
        if not isinstance(decision, dict) or set(decision) - {"requestId", "decision", "digest", "comment"}:
            return "malformed approval decision"
        if decision.get("decision") not in ("approve", "deny"):
            return "malformed approval decision"
        pending = MessageToDict(task.status.message.metadata).get(METADATA_KEY)
        if task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED or not pending:
            return "an approval decision was sent, but no approval is pending on the task it names"
        if decision.get("requestId") != pending["requestId"]:
            return (
                f"the decision answers approval request {decision.get('requestId')!r}, but another is pending"
            )
        if decision.get("digest") != pending["digest"]:
            return "the decision's digest does not match the pending request"
        approver = self.caller(context)
        if approver is None:
            return "an approval needs an authenticated approver"
        if approver not in self.approvers:
            return "this caller may not approve"
        if pending.get("requestedBy") == approver:
            return "an approval must come from someone other than the caller whose run asked"
        return ""

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel(updater.new_agent_message([new_text_part("cancelled")]))


class RustAgent(FakeAgent):
    """The agent's card declares a2a-rust's extension, as with_approval_gate makes it do; it pushes task
    events to the webhook a task's first message names (a2a-sdk's push sender)."""

    def __init__(self, executor: RustRefunds):
        super().__init__(executor)
        self.rust = executor

    def handler_options(self) -> dict:
        import httpx
        from a2a.server.tasks import BasePushNotificationSender, InMemoryPushNotificationConfigStore

        store = InMemoryPushNotificationConfigStore()
        return {
            "push_config_store": store,
            "push_sender": BasePushNotificationSender(httpx.AsyncClient(timeout=10), store),
        }

    def capabilities(self) -> AgentCapabilities:
        return AgentCapabilities(
            streaming=False, push_notifications=False, extensions=[AgentExtension(uri=EXTENSION_URI)]
        )

    def open_parked_task(self, token: str = "", push: tuple[str, str] | None = None) -> tuple[str, str]:
        """A new task, sent with `token` as its caller's bearer token and parked in input-required by the
        executor; `push` = (webhook URL, token) has the agent push the task's events there. Returns
        (task_id, context_id)."""
        from a2a.types import (
            GetTaskRequest,
            Message,
            Part,
            Role,
            SendMessageConfiguration,
            SendMessageRequest,
        )

        from tests.waiting import wait_until_async

        async def operation(client):
            message = Message(
                message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text="refund 1182")]
            )
            configuration = SendMessageConfiguration(return_immediately=True)
            if push is not None:
                configuration.task_push_notification_config.url = push[0]
                configuration.task_push_notification_config.token = push[1]
            request = SendMessageRequest(message=message, configuration=configuration)
            task = [r async for r in client.send_message(request)][-1].task

            async def parked() -> bool:
                state = (await client.get_task(GetTaskRequest(id=task.id))).status.state
                return state == TaskState.TASK_STATE_INPUT_REQUIRED

            await wait_until_async(parked, "the agent parking the task", interval=0.02)
            return task.id, task.context_id

        return self._run(operation, headers={"Authorization": f"Bearer {token}"} if token else None)
