"""A2A server (a2a-sdk): an AgentExecutor that refunds only after Reviewer's approval (`reviewer_gate.a2a`).

Register it with its card URL (Reviewer continues its tasks there; its audience is that URL), then run
it with the API token `register_agent` printed:

    .venv/bin/python manage.py register_agent --tenant acme --slug a2a-refunds --name "A2A refunds" \\
        --card-url http://127.0.0.1:9010/.well-known/agent-card.json
    REVIEWER_API_TOKEN=... python -m examples.connect.a2a_refund --port 9010 \\
        --audience http://127.0.0.1:9010/.well-known/agent-card.json

Send it "Refund EUR 40.00 for order 1182" with any A2A client (JSON-RPC at http://127.0.0.1:9010/): the
task parks in TASK_STATE_AUTH_REQUIRED until a reviewer decides; Reviewer then continues it with the
signed decision, and the agent refunds once and completes it (or the task ends REJECTED). Tasks are
kept in memory: examples/refund_agent/ is the durable, cancellable version.
"""

import asyncio
import re
from pathlib import Path

import uvicorn
from a2a.helpers import get_message_text, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentExtension, AgentInterface, AgentSkill
from starlette.applications import Starlette

from examples.connect.common import Ledger, client_from, parse_settings

# reviewer: begin
from reviewer_gate import EXTENSION_URI, build_request
from reviewer_gate.a2a import A2AApprovals, SQLiteRequestStore

# reviewer: end

ASKED = re.compile(r"EUR (?P<amount>\d+\.\d{2}) for order (?P<order_id>\w+)")


def say(updater: TaskUpdater, text: str):
    return updater.new_agent_message([new_text_part(text)])


class RefundExecutor(AgentExecutor):
    """Refunds what a message asks for, in EUR: "Refund EUR 40.00 for order 1182"."""

    # reviewer: begin
    def __init__(self, approvals: A2AApprovals, ledger: Ledger):
        self.approvals = approvals
        # reviewer: end
        self.ledger = ledger

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        # reviewer: begin
        released = await self.approvals.approval(context, event_queue, propose=self.propose)
        if released is None:
            return  # parked until Reviewer continues the task, or ended (rejected, refused)
        updater, arguments = released.updater, released.action["arguments"]  # a reviewer may edit them
        try:
            transaction_id = await asyncio.to_thread(
                self.ledger.refund,
                arguments["order_id"],
                arguments["amount"],
                idempotency_key=released.idempotency_key,
            )
        except Exception as error:
            await released.report("unknown", detail=repr(error))  # it may have happened: reconcile by key
            raise
        await released.report("succeeded", transaction_id=transaction_id)
        # reviewer: end
        await updater.complete(
            say(
                updater,
                f"refunded EUR {arguments['amount']} for order {arguments['order_id']}: {transaction_id}",
            )
        )

    # reviewer: begin
    async def propose(self, context: RequestContext, updater: TaskUpdater) -> dict | None:
        # reviewer: end
        """The approval request for a new task, or None after rejecting a message that asks nothing."""
        asked = ASKED.search(get_message_text(context.message)) if context.message else None
        if asked is None:
            await updater.reject(say(updater, 'Ask like this: "Refund EUR 40.00 for order 1182".'))
            return None
        # reviewer: begin
        action = {"tool": "payments.refund", "arguments": {**asked.groupdict(), "currency": "EUR"}}
        return build_request(
            action,
            summary=f"Refund EUR {asked['amount']} for order {asked['order_id']}",
            principal={"id": "requester", "display": "Rita Requester"},
            consequences={"amount": asked["amount"], "currency": "EUR", "reversible": False},
            ttl_seconds=3600,
        )
        # reviewer: end

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel(say(updater, "Cancelled; nothing was refunded."))


def build_app(settings) -> Starlette:
    card = AgentCard(
        name="Refund agent (A2A example)",
        description="Refunds an order.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(
                url=f"http://127.0.0.1:{settings.port}/", protocol_binding="JSONRPC", protocol_version="1.0"
            )
        ],
        capabilities=AgentCapabilities(
            streaming=False,
            # reviewer: begin
            extensions=[
                AgentExtension(uri=EXTENSION_URI, description="Refunds on a signed Reviewer decision only")
            ],
            # reviewer: end
        ),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(id="refund", name="Refund an order", description="Refunds EUR", tags=["payments"])
        ],
    )
    # reviewer: begin
    requests = SQLiteRequestStore(Path(settings.ledger).with_suffix(".requests.sqlite3"))
    executor = RefundExecutor(A2AApprovals(client_from(settings), requests), Ledger(settings.ledger))
    # reviewer: end
    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card)
    return Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/")])


if __name__ == "__main__":
    settings = parse_settings("python -m examples.connect.a2a_refund", __doc__.splitlines()[0], port=9010)
    uvicorn.run(build_app(settings), host="127.0.0.1", port=settings.port)
