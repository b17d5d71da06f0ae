"""Run the real refund agent as a subprocess and talk to it with the a2a-sdk client.

Every server binds 127.0.0.1 on a free port; every wait polls with a deadline (no bare sleeps).
"""

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import (
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
    TaskState,
)
from a2a.utils import TransportProtocol
from google.protobuf.json_format import MessageToDict

from reviewer_gate import gate
from tests.waiting import wait_until, wait_until_async

REPO = Path(__file__).resolve().parents[2]
# For the processes the tests start: this checkout, and its own reviewer-gate before the venv's (an
# editable install may point at another checkout of the project).
CHECKOUT_PYTHONPATH = os.pathsep.join([str(REPO), str(REPO / "sdk" / "python" / "src")])
TERMINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop_process(process: subprocess.Popen | None) -> None:
    """Stop a process we started, by its PID: terminate, wait, then kill."""
    stop_processes([process])


def stop_processes(processes: list[subprocess.Popen | None]) -> None:
    """Stop processes we started, by their PIDs: terminate them all first, then wait for each (and kill
    what outlives its wait), so their shutdowns overlap instead of adding up."""
    running = [process for process in processes if process is not None and process.poll() is None]
    for process in running:
        process.terminate()
    for process in running:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


class AgentProcess:
    """`python -m examples.refund_agent` on a loopback port, stopped by its PID."""

    def __init__(
        self,
        *,
        state_dir: Path,
        reviewer_url: str,
        port: int | None = None,
        downstream_url: str | None = None,
        extra_args: list[str] | None = None,
    ):
        self.port = port or free_port()
        self.state_dir = state_dir
        self.log_path = state_dir.parent / f"{state_dir.name}-agent-{self.port}-{uuid.uuid4().hex[:6]}.log"
        self.args = [
            sys.executable,
            "-m",
            "examples.refund_agent",
            "--port",
            str(self.port),
            "--reviewer-url",
            reviewer_url,
            "--api-token",
            "agent-api-token",
            "--state-dir",
            str(state_dir),
            "--log-level",
            "info",
            *(["--downstream-url", downstream_url] if downstream_url else []),
            *(extra_args or []),
        ]
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def audience(self) -> str:
        return f"{self.url}/.well-known/agent-card.json"

    def start(self, timeout: float = 30) -> "AgentProcess":
        return self.launch().wait_ready(timeout)

    def launch(self) -> "AgentProcess":
        """Start the process without waiting for it (the e2e stack starts its servers side by side)."""
        env = {**os.environ, "PYTHONPATH": CHECKOUT_PYTHONPATH}
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.args, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        return self

    def wait_ready(self, timeout: float = 30) -> "AgentProcess":
        """Wait until the agent serves its card; stop it and fail, with its log, if it exits first."""
        process = self.process
        assert process is not None, "launch() first"

        def card_served() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"agent exited with {process.returncode}:\n{self.log()}")
            try:
                return httpx.get(self.audience, timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        try:
            wait_until(card_served, "the agent's card", timeout=timeout, interval=0.1, detail=self.log)
        except AssertionError:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        stop_process(self.process)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class AgentClient:
    """The a2a-sdk client (JSON-RPC, no streaming) plus the waits the tests need."""

    def __init__(self, http: httpx.AsyncClient, client):
        self.http = http
        self.client = client

    @classmethod
    async def connect(cls, agent_url: str) -> "AgentClient":
        http = httpx.AsyncClient(timeout=30)
        card = await A2ACardResolver(http, agent_url).get_agent_card()
        config = ClientConfig(
            streaming=False, httpx_client=http, supported_protocol_bindings=[TransportProtocol.JSONRPC]
        )
        return cls(http, ClientFactory(config).create(card))

    async def close(self) -> None:
        await self.client.close()
        await self.http.aclose()

    async def send(self, message: Message) -> None:
        """Send without waiting for the outcome: state is read with GetTask, never from this reply."""
        request = SendMessageRequest(
            message=message, configuration=SendMessageConfiguration(return_immediately=True)
        )
        async for _ in self.client.send_message(request):
            pass

    async def ask_refund(self, text: str, *, principal: dict | None = None) -> Task:
        message = Message(
            message_id=str(uuid.uuid4()),
            role=Role.ROLE_USER,
            parts=[Part(text=text)],
            metadata={"principal": principal} if principal else None,
        )
        request = SendMessageRequest(
            message=message, configuration=SendMessageConfiguration(return_immediately=True)
        )
        responses = [response async for response in self.client.send_message(request)]
        return responses[-1].task

    async def send_decision(self, task: Task, token: str) -> None:
        await self.send(
            Message(
                message_id=str(uuid.uuid4()),
                role=Role.ROLE_USER,
                task_id=task.id,
                context_id=task.context_id,
                parts=[Part(text="Reviewer decision")],
                metadata={gate.EXTENSION_URI: {"decision": token}},
            )
        )

    async def get(self, task_id: str) -> Task:
        return await self.client.get_task(GetTaskRequest(id=task_id))

    async def wait_for(self, task_id: str, accept: Callable[[Task], bool], *, timeout: float = 15) -> Task:
        last: list[Task] = []

        async def accepted() -> Task | None:
            last[:] = [await self.get(task_id)]
            return last[0] if accept(last[0]) else None

        return await wait_until_async(
            accepted,
            f"task {task_id}",
            timeout=timeout,
            detail=lambda: f"still {TaskState.Name(last[0].status.state)}",
        )

    async def wait_parked(self, task_id: str, *, not_request: str | None = None) -> tuple[Task, dict]:
        """Wait for AUTH_REQUIRED (on a request other than `not_request`); return the task and request."""

        def parked(task: Task) -> bool:
            if task.status.state in TERMINAL:
                raise AssertionError(f"task ended {TaskState.Name(task.status.state)}: {status_text(task)}")
            request = approval_request_of(task)
            return (
                task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
                and request is not None
                and request["request_id"] != not_request
            )

        task = await self.wait_for(task_id, parked)
        request = approval_request_of(task)
        assert request is not None  # parked() saw it
        return task, request

    async def wait_asked(self, task_id: str) -> Task:
        """Wait until the agent parked the task on its request, or ended it on a decision a policy made at
        intake (the announcement's answer carries it, and reviewer_gate.a2a acts on it without parking)."""

        def asked(task: Task) -> bool:
            parked = task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
            return task.status.state in TERMINAL or (parked and approval_request_of(task) is not None)

        return await self.wait_for(task_id, asked)

    async def wait_terminal(self, task_id: str) -> Task:
        return await self.wait_for(task_id, lambda task: task.status.state in TERMINAL)


def approval_request_of(task: Task) -> dict | None:
    metadata = MessageToDict(task.status.message.metadata)
    return metadata.get(gate.EXTENSION_URI, {}).get("request")


def status_text(task: Task) -> str:
    return " ".join(part.text for part in task.status.message.parts)
