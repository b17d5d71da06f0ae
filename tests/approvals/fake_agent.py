"""A small but real A2A agent for the worker tests: an a2a-sdk server (JSON-RPC) on a loopback port,
served by uvicorn in a thread, that parks every new task in AUTH_REQUIRED and records what Reviewer
sends it. `fail_next(n)` makes the next n JSON-RPC calls answer HTTP 503 before the SDK sees them, so
retries and dead letters are exercised over a real socket.
"""

import asyncio
import socket
import threading
import uuid
from dataclasses import dataclass
from typing import Self

import httpx
import uvicorn
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskState,
)
from a2a.utils import TransportProtocol
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse

from approvals.a2a.push import EXTENSION_URI
from tests.waiting import wait_until, wait_until_async


@dataclass
class Received:
    task_id: str
    message_id: str
    role: int
    text: str
    metadata: dict


class RecordingExecutor(AgentExecutor):
    def __init__(self):
        self.received: list[Received] = []
        self.cancelled: list[str] = []
        self.finish = True  # False: a decision leaves the task WORKING (an execution that never reports)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task, message = context.current_task, context.message
        # The request handler gives every request a message, a task id and a context id.
        assert message is not None and context.task_id is not None and context.context_id is not None
        if task is None:
            await event_queue.enqueue_event(new_task_from_user_message(message))
            updater = TaskUpdater(event_queue, context.task_id, context.context_id)
            await updater.requires_auth(updater.new_agent_message([new_text_part("Approval required")]))
            return
        self.received.append(
            Received(
                task.id,
                message.message_id,
                message.role,
                " ".join(p.text for p in message.parts),
                MessageToDict(message.metadata),
            )
        )
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        if self.finish:
            await updater.complete(updater.new_agent_message([new_text_part("done")]))
        else:
            await updater.start_work(updater.new_agent_message([new_text_part("working")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None  # given by the handler
        self.cancelled.append(context.task_id)
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel(updater.new_agent_message([new_text_part("cancelled")]))


class FailingFront:
    """ASGI middleware: the next `failures` JSON-RPC POSTs get a 503 (the card stays readable). It also
    records the client address of every request: one address per TCP connection Reviewer opened."""

    def __init__(self, app):
        self.app = app
        self.failures = 0
        self.refused = 0
        self.dropped_responses = 0  # the next JSON-RPC POSTs are processed, but their answer is a 502
        self.client_addresses: list[tuple] = []
        self.traceparents: list[str] = []  # each JSON-RPC POST's traceparent header ("" without)

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            self.client_addresses.append(tuple(scope.get("client") or ()))
        if scope["type"] == "http" and scope["method"] == "POST":
            headers = dict(scope.get("headers") or [])
            self.traceparents.append(headers.get(b"traceparent", b"").decode())
        if scope["type"] == "http" and scope["method"] == "POST" and self.dropped_responses:
            # A lost response (the one fault here that is staged, not real): the agent got and handled the
            # message, the caller sees a 502 and must assume it did not.
            self.dropped_responses -= 1

            async def discard(message):
                return None

            await self.app(scope, receive, discard)
            await PlainTextResponse("response lost", status_code=502)(scope, receive, send)
            return
        if scope["type"] == "http" and scope["method"] == "POST" and self.failures:
            self.failures -= 1
            self.refused += 1
            await PlainTextResponse("temporarily unavailable", status_code=503)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class FakeAgent:
    def __init__(self, executor: AgentExecutor | None = None):
        self.executor = executor or RecordingExecutor()
        self.url = ""
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.front: FailingFront | None = None

    @staticmethod
    def closed_port_url() -> str:
        """A loopback URL where nothing listens (the port was free a moment ago)."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            return f"http://127.0.0.1:{probe.getsockname()[1]}"

    @property
    def card_url(self) -> str:
        return f"{self.url}/.well-known/agent-card.json"

    def start(self, timeout: float = 10) -> Self:
        app = Starlette(routes=[])  # routes are added once the port (and so the card URL) is known
        self.front = FailingFront(app)
        self._server = uvicorn.Server(
            uvicorn.Config(self.front, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        )
        server = self._server
        thread = self._thread = threading.Thread(target=server.run, name="fake-agent", daemon=True)
        thread.start()

        def started() -> bool:
            if not thread.is_alive():
                raise RuntimeError("the fake agent did not start")
            return server.started

        wait_until(started, "the fake agent's start", timeout=timeout, interval=0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        card = AgentCard(
            name="fake agent",
            description="records what Reviewer sends",
            version="1",
            supported_interfaces=[
                AgentInterface(url=f"{self.url}/", protocol_binding="JSONRPC", protocol_version="1.0")
            ],
            capabilities=self.capabilities(),
            default_input_modes=["text/plain"],
            default_output_modes=["text/plain"],
        )
        handler = DefaultRequestHandler(
            agent_executor=self.executor,
            task_store=InMemoryTaskStore(),
            agent_card=card,
            **self.handler_options(),
        )
        app.router.routes.extend(
            [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/")]
        )
        return self

    def handler_options(self) -> dict:
        """More arguments for the request handler (a subclass adds push notifications)."""
        return {}

    def capabilities(self) -> AgentCapabilities:
        """What the card declares (a subclass adds the extensions it speaks)."""
        return AgentCapabilities(streaming=False, push_notifications=False)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def fail_next(self, count: int) -> None:
        assert self.front is not None, "start() first"
        self.front.failures = count

    def drop_next_responses(self, count: int) -> None:
        assert self.front is not None, "start() first"
        self.front.dropped_responses = count

    # --- acting as the agent's user (a client of the agent) ------------------------------------------

    def _run(self, operation, headers: dict | None = None):
        async def run():
            async with httpx.AsyncClient(timeout=10, headers=headers) as http:
                card = await A2ACardResolver(http, self.url).get_agent_card()
                client = ClientFactory(
                    ClientConfig(
                        streaming=False,
                        httpx_client=http,
                        supported_protocol_bindings=[TransportProtocol.JSONRPC],
                    )
                ).create(card)
                return await operation(client)

        return asyncio.run(run())

    def open_task(self) -> tuple[str, str]:
        """A new task, parked in AUTH_REQUIRED; returns (task_id, context_id)."""

        async def operation(client):
            message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text="refund")])
            request = SendMessageRequest(
                message=message, configuration=SendMessageConfiguration(return_immediately=True)
            )
            task = [r async for r in client.send_message(request)][-1].task

            async def parked() -> bool:
                state = (await client.get_task(GetTaskRequest(id=task.id))).status.state
                return state == TaskState.TASK_STATE_AUTH_REQUIRED

            await wait_until_async(parked, "the fake agent parking the task", interval=0.02)
            return task.id, task.context_id

        return self._run(operation)

    def state_of(self, task_id: str) -> str:
        async def operation(client):
            return TaskState.Name((await client.get_task(GetTaskRequest(id=task_id))).status.state)

        return self._run(operation)

    def message_task(self, task_id: str, context_id: str, text: str = "hello") -> None:
        async def operation(client):
            message = Message(
                message_id=str(uuid.uuid4()),
                role=Role.ROLE_USER,
                task_id=task_id,
                context_id=context_id,
                parts=[Part(text=text)],
            )
            request = SendMessageRequest(
                message=message, configuration=SendMessageConfiguration(return_immediately=True)
            )
            async for _ in client.send_message(request):
                pass

        self._run(operation)

    def cancel(self, task_id: str) -> None:
        from a2a.types import CancelTaskRequest

        self._run(lambda client: client.cancel_task(CancelTaskRequest(id=task_id)))

    def decisions_received(self) -> list[Received]:
        assert isinstance(self.executor, RecordingExecutor), "only a recording executor keeps what it got"
        return [r for r in self.executor.received if EXTENSION_URI in r.metadata]
