"""reviewer_gate.a2a in a real a2a-sdk server (Starlette under uvicorn on loopback) driven by the a2a-sdk
client: the executor's whole approval is `await approvals.approval(...)`. The fake Reviewer signs."""

import asyncio
import socket
import threading
import time
import uuid

import pytest

pytest.importorskip("a2a")

import httpx  # noqa: E402
import uvicorn  # noqa: E402
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory  # noqa: E402
from a2a.server.agent_execution import AgentExecutor  # noqa: E402
from a2a.server.request_handlers import DefaultRequestHandler  # noqa: E402
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes  # noqa: E402
from a2a.server.tasks import InMemoryTaskStore  # noqa: E402
from a2a.types import (  # noqa: E402
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
from a2a.utils import TransportProtocol  # noqa: E402
from google.protobuf.json_format import MessageToDict  # noqa: E402
from starlette.applications import Starlette  # noqa: E402

from reviewer_gate import EXTENSION_URI, ReviewerClient, build_request  # noqa: E402
from reviewer_gate.a2a import A2AApprovals, SQLiteRequestStore  # noqa: E402
from reviewer_gate.testing import decide_at_intake, decision_claims  # noqa: E402

ACTION = {"tool": "files.delete", "arguments": {"path": "reports/q3.xlsx"}}


class DeletingExecutor(AgentExecutor):
    def __init__(self, approvals: A2AApprovals, deleted: list, cancellation_checks: list | None = None):
        self.approvals, self.deleted = approvals, deleted
        # The task ids still_wanted was asked about, in order.
        self.cancellation_checks = [] if cancellation_checks is None else cancellation_checks

    async def execute(self, context, event_queue):
        released = await self.approvals.approval(
            context, event_queue, propose=self.propose, still_wanted=self.still_wanted
        )
        if released is None:
            return
        self.deleted.append((released.action["arguments"]["path"], released.idempotency_key))
        await released.report("succeeded")
        await released.updater.complete()

    async def propose(self, context, updater):
        return build_request(ACTION, summary="Delete reports/q3.xlsx", principal={"id": "casey"})

    async def still_wanted(self, context) -> bool:
        self.cancellation_checks.append(context.task_id)
        return True

    async def cancel(self, context, event_queue):
        raise NotImplementedError


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def agent(reviewer, tmp_path):
    """The agent on loopback; yields (url, audience, deleted)."""
    yield from serve_agent(reviewer, tmp_path)


@pytest.fixture
def cancellation_checks():
    return []


@pytest.fixture
def watched_agent(reviewer, tmp_path, cancellation_checks):
    """The agent, its still_wanted calls recorded in `cancellation_checks`."""
    yield from serve_agent(reviewer, tmp_path, cancellation_checks)


@pytest.fixture
def patient_agent(reviewer, tmp_path):
    """The same agent, never acting on the announcement's answer (answer_wait=0)."""
    yield from serve_agent(reviewer, tmp_path, answer_wait=0)


def serve_agent(reviewer, tmp_path, cancellation_checks: list | None = None, **options):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    audience = f"{url}/.well-known/agent-card.json"
    # Its registration in Reviewer: tenant acme (testing.decision_claims signs for acme), slug "deleter".
    client = ReviewerClient(
        reviewer_url=reviewer.url, api_token="a2a-token", audience=audience, tenant="acme", agent="deleter"
    )
    deleted: list = []
    card = AgentCard(
        name="deleter",
        description="deletes after approval",
        version="1",
        supported_interfaces=[
            AgentInterface(url=f"{url}/", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
    )
    approvals = A2AApprovals(client, SQLiteRequestStore(tmp_path / "requests.sqlite3"), **options)
    handler = DefaultRequestHandler(
        agent_executor=DeletingExecutor(approvals, deleted, cancellation_checks),
        task_store=InMemoryTaskStore(),
        agent_card=card,
    )
    app = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/")])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the agent did not start"
        time.sleep(0.05)  # readiness poll, bounded by the deadline
    yield url, audience, deleted
    server.should_exit = True
    thread.join(timeout=10)


async def a2a_client(url: str):
    http = httpx.AsyncClient(timeout=30)
    card = await A2ACardResolver(http, url).get_agent_card()
    config = ClientConfig(
        streaming=False, httpx_client=http, supported_protocol_bindings=[TransportProtocol.JSONRPC]
    )
    return http, ClientFactory(config).create(card)


async def send(client, message: Message):
    request = SendMessageRequest(
        message=message, configuration=SendMessageConfiguration(return_immediately=True)
    )
    return [response async for response in client.send_message(request)][-1]


async def wait_state(client, task_id: str, state) -> object:
    deadline = time.monotonic() + 15
    while True:
        task = await client.get_task(GetTaskRequest(id=task_id))
        if task.status.state == state:
            return task
        assert time.monotonic() < deadline, f"task still {TaskState.Name(task.status.state)}"
        await asyncio.sleep(0.05)  # poll, bounded by the deadline


async def park_and_decide(url, reviewer, key, audience, *, decision="approved", task_override=None, **claims):
    http, client = await a2a_client(url)
    try:
        first = await send(
            client, Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text="delete it")])
        )
        task = await wait_state(client, first.task.id, TaskState.TASK_STATE_AUTH_REQUIRED)
        request = MessageToDict(task.status.message.metadata)[EXTENSION_URI]["request"]
        token = key.sign(
            decision_claims(
                issuer=reviewer.url,
                audience=audience,
                task_id=task_override or task.id,
                request_id=request["request_id"],
                action_digest=request["action_digest"],
                context_id=task.context_id,
                decision=decision,
                **claims,
            )
        )
        continuation = Message(
            message_id=str(uuid.uuid4()),
            role=Role.ROLE_USER,
            task_id=task.id,
            context_id=task.context_id,
            parts=[Part(text="Reviewer decision")],
            metadata={EXTENSION_URI: {"decision": token}},
        )
        await send(client, continuation)
        return client, http, task, request
    except BaseException:
        await http.aclose()
        raise


async def test_an_approval_is_one_awaited_call_and_acts_once(agent, reviewer, key):
    url, audience, deleted = agent
    client, http, task, request = await park_and_decide(url, reviewer, key, audience)
    try:
        await wait_state(client, task.id, TaskState.TASK_STATE_COMPLETED)
    finally:
        await http.aclose()
    ((path, idempotency_key),) = deleted
    assert path == "reports/q3.xlsx"
    assert reviewer.consumes_for(idempotency_key) and reviewer.outcomes_for(idempotency_key) == ["succeeded"]
    assert reviewer.proposals_for(task.id)[0]["request"] == request  # announced in the background
    assert request["agent"] == "deleter"  # the parked request names its registration (ListTasks adopts by it)


@pytest.mark.parametrize("consume, checks", [(True, 2), (False, 1)])
async def test_cancellation_is_checked_around_a_consume_and_once_without_one(
    watched_agent, reviewer, key, cancellation_checks, consume, checks
):
    """Before and after a consume (its round trip is where a cancel may land); for a decision that
    needs no consume (consume_online: false), once, right before the action is released."""
    url, audience, deleted = watched_agent
    client, http, task, _ = await park_and_decide(url, reviewer, key, audience, consume=consume)
    try:
        await wait_state(client, task.id, TaskState.TASK_STATE_COMPLETED)
    finally:
        await http.aclose()
    assert len(deleted) == 1 and len(reviewer.consumes) == (1 if consume else 0)
    assert cancellation_checks == [task.id] * checks


async def test_a_decision_for_another_tenant_fails_the_task_and_nothing_runs(agent, reviewer, key):
    url, audience, deleted = agent
    client, http, task, _ = await park_and_decide(url, reviewer, key, audience, tenant="globex")
    try:
        failed = await wait_state(client, task.id, TaskState.TASK_STATE_FAILED)
    finally:
        await http.aclose()
    assert "wrong_tenant" in failed.status.message.parts[0].text
    assert deleted == []


async def test_a_rejection_rejects_the_task_with_the_reason(agent, reviewer, key):
    url, audience, deleted = agent
    client, http, task, _ = await park_and_decide(
        url, reviewer, key, audience, decision="rejected", reason="keep it"
    )
    try:
        ended = await wait_state(client, task.id, TaskState.TASK_STATE_REJECTED)
    finally:
        await http.aclose()
    assert "keep it" in " ".join(part.text for part in ended.status.message.parts)
    assert deleted == [] and reviewer.consumes == []


async def test_a_decision_for_another_task_fails_it_and_nothing_runs(agent, reviewer, key):
    url, audience, deleted = agent
    client, http, task, _ = await park_and_decide(url, reviewer, key, audience, task_override="another-task")
    try:
        ended = await wait_state(client, task.id, TaskState.TASK_STATE_FAILED)
    finally:
        await http.aclose()
    assert "wrong_task" in " ".join(part.text for part in ended.status.message.parts)
    assert deleted == []


async def first_message_until(url: str, state):
    """Send a new task's first message, and no other, and wait for the task to reach `state`."""
    http, client = await a2a_client(url)
    try:
        first = await send(
            client, Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text="delete it")])
        )
        return await wait_state(client, first.task.id, state)
    finally:
        await http.aclose()


async def test_a_request_policy_allows_is_acted_on_from_the_announcements_answer(agent, reviewer, key):
    """No continuation is sent here: the POST's answer carried the signed decision, and the first
    message's own execute() verified, consumed and acted on it."""
    url, audience, deleted = agent
    decide_at_intake(reviewer, key, audience=audience)
    await first_message_until(url, TaskState.TASK_STATE_COMPLETED)
    ((path, idempotency_key),) = deleted
    assert path == "reports/q3.xlsx"
    assert len(reviewer.consumes_for(idempotency_key)) == 1
    assert reviewer.outcomes_for(idempotency_key) == ["succeeded"]
    # It told Reviewer it acts on the answer, so Reviewer holds the task's continuation meanwhile.
    assert [call["prefer"] for call in reviewer.proposals] == ["decision-in-answer"]


async def test_a_request_policy_denies_is_rejected_from_the_announcements_answer(agent, reviewer, key):
    url, audience, deleted = agent
    decide_at_intake(reviewer, key, audience=audience, decision="rejected", reason="not by agents")
    ended = await first_message_until(url, TaskState.TASK_STATE_REJECTED)
    assert "not by agents" in " ".join(part.text for part in ended.status.message.parts)
    assert deleted == [] and reviewer.consumes == []


async def test_without_answer_wait_the_task_waits_parked_for_the_continuation(patient_agent, reviewer, key):
    url, audience, deleted = patient_agent
    decide_at_intake(reviewer, key, audience=audience)
    client, http, task, _ = await park_and_decide(url, reviewer, key, audience)
    try:
        await wait_state(client, task.id, TaskState.TASK_STATE_COMPLETED)
    finally:
        await http.aclose()
    ((_, idempotency_key),) = deleted
    assert len(reviewer.consumes_for(idempotency_key)) == 1
    assert [call["prefer"] for call in reviewer.proposals] == [None]  # the continuation is not held
