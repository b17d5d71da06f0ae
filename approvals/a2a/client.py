"""Reviewer's calls to agents (DESIGN.md "A2A contract"); reading what agents push is push.py.

Calls: `send_continuation()`, `cancel_task()` and `get_task_state()` use the a2a-sdk client over an
httpx client that carries the agent's outbound credentials. They are blocking (the worker is a plain
loop): everything they need is read from the database first, then the network part runs on one
long-lived event loop (`_CallLoop`: one HTTP client and connection pool per agent, one TLS context),
under a total deadline. A refusal that can be retried raises `DeliveryError`. The state of a
task is only ever taken from GetTask or a push, never from the reply to SendMessage (the SDK can return
a stale snapshot there; see the a2a-sdk reference, pitfall 1).
"""

import asyncio
import logging
import ssl
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx
from a2a.client import A2ACardResolver, A2AClientError, ClientCallContext, ClientConfig, ClientFactory
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskState,
)
from a2a.utils import TransportProtocol
from a2a.utils.errors import A2AError, TaskNotFoundError
from google.protobuf.json_format import MessageToDict

from approvals.a2a.push import EXTENSION_URI, PushError, parked_batch, parked_request
from approvals.a2a.rust_approval import RUST_EXTENSION_URI, RUST_METADATA_KEY, rust_decision
from approvals.models import Agent, Decision, OutboxMessage, Proposal
from approvals.schemas import BatchSubmission, ProposalSubmission
from approvals.services.reconcile import TERMINAL_TASK_STATES
from lib import outbound, tracing

log = logging.getLogger(__name__)

# An agent card rarely changes; re-reading it for every call would double the requests.
CARD_TTL_SECONDS = 60
HTTP_TIMEOUT = httpx.Timeout(10.0, connect=5.0)
# The whole exchange (card + call), so a server that drips bytes cannot hold the worker.
CALL_DEADLINE_SECONDS = 30.0


# ---------------------------------------------------------------------------------------------------
# Calls to the agent


class DeliveryError(Exception):
    """The call did not get through, or the agent refused it for a reason that may pass: retry later."""


# The agent's fields AgentEndpoint.of reads (a caller may read only these).
AGENT_ENDPOINT_FIELDS = (
    "slug",
    "card_url",
    "outbound_auth_scheme",
    "outbound_auth_credentials",
    "approval_extension",
)


@dataclass(frozen=True)
class AgentEndpoint:
    """What a call needs, read from the database before any network I/O starts."""

    agent_id: int
    slug: str
    card_url: str
    headers: dict
    extension: str = Agent.ApprovalExtension.REVIEWER

    @classmethod
    def of(cls, agent: Agent) -> "AgentEndpoint":
        headers = {}
        if agent.outbound_auth_scheme == Agent.AuthScheme.BEARER and agent.outbound_auth_credentials:
            headers["Authorization"] = f"Bearer {agent.outbound_auth_credentials}"
        return cls(agent.id, agent.slug, agent.card_url, headers, agent.approval_extension)

    @property
    def speaks_a2a_rust(self) -> bool:
        return self.extension == Agent.ApprovalExtension.A2A_RUST

    @property
    def extension_uri(self) -> str:
        """The approval extension the agent's card must declare for its tasks to be listed."""
        return RUST_EXTENSION_URI if self.speaks_a2a_rust else EXTENSION_URI


@dataclass(frozen=True)
class TaskSnapshot:
    state: str  # a TaskState name
    detail: str = ""

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_TASK_STATES


_cards: dict[tuple[int, str], tuple[float, AgentCard]] = {}
_cards_lock = threading.Lock()


def forget_cards() -> None:
    """Forget what is cached about agents: their cards and their HTTP clients."""
    with _cards_lock:
        _cards.clear()
    _calls.forget_clients()


class _CallLoop:
    """One event loop per process, in a daemon thread, that every call to an agent runs on, so HTTP
    clients live across calls: one connection pool per agent (keep-alive, no new TCP or TLS handshake
    per delivery) and one TLS context for all of them (building one costs ~20 ms). The callers stay
    blocking: they submit a coroutine and wait for its result."""

    def __init__(self):
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clients: dict[int, tuple[tuple, httpx.AsyncClient]] = {}  # agent id -> (key, client)
        self._tls: ssl.SSLContext | None = None

    def run(self, coroutine_function, timeout: float):
        """Run `coroutine_function()` on the loop under `timeout` seconds; its result or its exception."""
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="a2a-calls", daemon=True).start()
            loop = self._loop
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coroutine_function(), timeout), loop)
        return future.result()

    def client_for(self, endpoint: "AgentEndpoint") -> httpx.AsyncClient:
        """The agent's HTTP client (runs on the loop). A changed card URL or credential gets a new one."""
        # Through the allow-list (lib/outbound.py): the card URL is admin input, its interfaces
        # agent input, and neither may point Reviewer (with the agent's token) at another service; the
        # check runs in the client's transport on every request, redirects included.
        key = (endpoint.card_url, tuple(sorted(endpoint.headers.items())))
        current = self._clients.get(endpoint.agent_id)
        if current and current[0] == key:
            return current[1]
        if current:
            asyncio.get_running_loop().create_task(current[1].aclose())
        if self._tls is None:
            self._tls = ssl.create_default_context()
        client = outbound.async_client(
            timeout=HTTP_TIMEOUT, headers=endpoint.headers, follow_redirects=False, verify=self._tls
        )
        self._clients[endpoint.agent_id] = (key, client)
        return client

    def drop_client(self, agent_id: int) -> None:
        """After a failure: the next call starts with fresh connections (thread-safe)."""
        with self._lock:
            loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(self._drop, agent_id)

    def _drop(self, agent_id: int) -> None:
        current = self._clients.pop(agent_id, None)
        if current:
            asyncio.get_running_loop().create_task(current[1].aclose())

    def forget_clients(self) -> None:
        with self._lock:
            loop = self._loop
        if loop is not None:
            for agent_id in list(self._clients):
                loop.call_soon_threadsafe(self._drop, agent_id)


_calls = _CallLoop()


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return (
        parts.scheme,
        (parts.hostname or "").lower(),
        parts.port or {"http": 80, "https": 443}.get(parts.scheme),
    )


def _check_same_origin(endpoint: AgentEndpoint, card: AgentCard) -> None:
    """The card is agent-controlled; the card URL is what an admin registered. Reviewer calls (with the
    agent's credentials) only interfaces on the registered origin, never an address the card names
    elsewhere (an internal service, another agent)."""
    registered = _origin(endpoint.card_url)
    for interface in card.supported_interfaces:
        if _origin(interface.url) != registered:
            raise DeliveryError(
                f"{endpoint.slug}'s card names an interface at {interface.url}, not on the registered "
                f"origin of {endpoint.card_url}; refusing to call it"
            )


async def _card(endpoint: AgentEndpoint, http: httpx.AsyncClient) -> AgentCard:
    key = (endpoint.agent_id, endpoint.card_url)
    with _cards_lock:
        cached = _cards.get(key)
    if cached and time.monotonic() - cached[0] < CARD_TTL_SECONDS:
        return cached[1]
    # card_url is the card's own URL, so the resolver gets it as the base and an empty card path.
    card = await A2ACardResolver(http, endpoint.card_url, agent_card_path="").get_agent_card()
    _check_same_origin(endpoint, card)
    with _cards_lock:
        _cards[key] = (time.monotonic(), card)
    return card


def _call(endpoint: AgentEndpoint, operation, *, with_card: bool = False):
    """Run `operation(client)` (or `operation(client, card)`) against the agent on the shared call loop,
    under the total deadline. Transport failures become DeliveryError; A2A protocol errors (A2AError)
    pass through."""

    async def run():
        http = _calls.client_for(endpoint)
        card = await _card(endpoint, http)
        config = ClientConfig(
            streaming=False,
            httpx_client=http,
            supported_protocol_bindings=[TransportProtocol.JSONRPC, TransportProtocol.HTTP_JSON],
        )
        try:
            client = ClientFactory(config).create(card)
        except ValueError as error:  # no transport both sides speak
            raise DeliveryError(f"cannot talk to {endpoint.slug}: {error}") from error
        return await (operation(client, card) if with_card else operation(client))

    try:
        return _calls.run(run, CALL_DEADLINE_SECONDS)
    except (A2AClientError, httpx.HTTPError, TimeoutError) as error:
        # A moved or restarted agent may publish another interface: read its card again next time, and
        # open fresh connections.
        with _cards_lock:
            _cards.pop((endpoint.agent_id, endpoint.card_url), None)
        _calls.drop_client(endpoint.agent_id)
        # What a failed connection said (refused, reset, which protocol answered) is a port scanner's
        # answer: it goes to the log, and the stored error (outbox, evidence) is generic.
        log.warning("call to agent %s failed: %s: %s", endpoint.slug, type(error).__name__, error)
        raise DeliveryError(f"{endpoint.slug}: {failure_text(error)}") from error


def failure_text(error: BaseException) -> str:
    """The generic, storable text of a failed call (the detail is logged, never stored)."""
    if outbound.not_allowed(error):
        return "agent host not allowed (AGENT_ALLOWED_HOSTS / AGENT_ALLOWED_NETWORKS); see the worker log"
    if isinstance(error, TimeoutError):
        return "the agent did not answer in time"
    return "could not reach the agent or read its answer; see the worker log"


def _extension_context(endpoint: AgentEndpoint | None = None) -> ClientCallContext:
    """The call's A2A headers: the extensions, and the current span's W3C traceparent when traces are on
    (read on the caller's thread: the call itself runs on the shared loop, outside this context)."""
    uris = [EXTENSION_URI]
    if endpoint is not None and endpoint.speaks_a2a_rust:
        uris.insert(0, RUST_EXTENSION_URI)
    headers = {"A2A-Extensions": ", ".join(uris)}
    traceparent = tracing.current_traceparent()
    if traceparent:
        headers["traceparent"] = traceparent
    return ClientCallContext(service_parameters=headers)


async def _task_snapshot(client, task_id: str) -> TaskSnapshot:
    task = await client.get_task(GetTaskRequest(id=task_id), context=_extension_context())
    detail = " ".join(part.text for part in task.status.message.parts if part.text)[:1000]
    return TaskSnapshot(TaskState.Name(task.status.state), detail)


async def _settled_by_terminal_task(client, task_id: str, refusal: A2AError) -> str:
    """The agent refused; that counts as delivered only if GetTask shows the task is over
    (-32004 to a terminal task; TaskNotCancelable for a finished one). Otherwise retry."""
    try:
        snapshot = await _task_snapshot(client, task_id)
    except A2AError as error:
        raise DeliveryError(
            f"refused ({type(refusal).__name__}: {refusal.message}); GetTask failed too: "
            f"{type(error).__name__}: {error.message}"
        ) from refusal
    if snapshot.is_terminal:
        return f"task already {snapshot.state}"
    raise DeliveryError(
        f"refused while the task is {snapshot.state}: {type(refusal).__name__}: {refusal.message}"
    )


def _decision_text(decision: Decision) -> str:
    summary = decision.proposal.summary
    if decision.kind == Decision.Kind.APPROVED:
        return f"Approved in Reviewer: {summary}"
    if decision.kind == Decision.Kind.NEEDS_INFO:
        return f"Reviewer asks before deciding on {summary}: {decision.reason}"
    return f"Rejected in Reviewer: {summary}. Reason: {decision.reason or 'none given'}"


CONTINUATION_FIELDS = (
    "kind",
    "reason",
    "token",
    "proposal__summary",
    "proposal__task_id",
    "proposal__context_id",
    *(f"proposal__agent__{field}" for field in AGENT_ENDPOINT_FIELDS),
)


def continuation_message(outbox_message: OutboxMessage) -> tuple[AgentEndpoint, Message]:
    """The SendMessage payload for a decision: same task and context, role user, the JWT in the
    message metadata under our extension, and the outbox row's stable message_id."""
    # Only what the message and the call need: the proposal's long JSON fields (action, consequences,
    # diff, evidence) cost more to decode than the read itself, on the path to the agent.
    decision = (
        Decision.objects.select_related("proposal__agent")
        .only(*CONTINUATION_FIELDS)
        .get(jti=outbox_message.payload["jti"])
    )
    proposal = decision.proposal
    endpoint = AgentEndpoint.of(proposal.agent)
    metadata: dict = {EXTENSION_URI: {"decision": decision.token}}
    extensions = [EXTENSION_URI]
    if endpoint.speaks_a2a_rust:
        # a2a-rust's approval extension: its decision beside Reviewer's signed one (rust_approval.py).
        answer = rust_decision(Decision.objects.select_related("proposal__supersedes").get(pk=decision.pk))
        if answer is not None:
            metadata[RUST_METADATA_KEY] = answer
        extensions.insert(0, RUST_EXTENSION_URI)
    message = Message(
        message_id=outbox_message.message_id,
        role=Role.ROLE_USER,
        task_id=proposal.task_id,
        context_id=proposal.context_id,
        parts=[Part(text=_decision_text(decision))],
        metadata=metadata,
        extensions=extensions,
    )
    return endpoint, message


def send_continuation(outbox_message: OutboxMessage) -> str:
    """Deliver a decision. Returns a short note on success; raises DeliveryError to retry."""
    endpoint, message = continuation_message(outbox_message)
    # return_immediately: the agent may take long to act, and the reply says nothing we trust anyway.
    request = SendMessageRequest(
        message=message, configuration=SendMessageConfiguration(return_immediately=True)
    )
    context = _extension_context(endpoint)

    async def operation(client):
        try:
            async for _ in client.send_message(request, context=context):
                pass
        except A2AError as refusal:
            if isinstance(refusal, A2AClientError):
                raise
            return await _settled_by_terminal_task(client, message.task_id, refusal)
        return "accepted"

    return _call(endpoint, operation)


def cancel_task(outbox_message: OutboxMessage) -> str:
    """CancelTask for a revoked, expired or halted proposal. A task that is already over (or that the
    agent does not know at all) has nothing left to cancel: delivered."""
    proposal = Proposal.objects.select_related("agent").get(pk=outbox_message.proposal_id)
    endpoint, task_id = AgentEndpoint.of(proposal.agent), proposal.task_id
    context = _extension_context()

    async def operation(client):
        try:
            await client.cancel_task(CancelTaskRequest(id=task_id), context=context)
        except TaskNotFoundError:
            return "the agent does not know this task: nothing to cancel"
        except A2AError as refusal:
            if isinstance(refusal, A2AClientError):
                raise
            return await _settled_by_terminal_task(client, task_id, refusal)
        return "cancelled"

    return _call(endpoint, operation)


def get_task_state(agent: Agent, task_id: str) -> TaskSnapshot:
    """The task's current state from GetTask. Raises DeliveryError when the agent cannot tell."""
    endpoint = AgentEndpoint.of(agent)

    async def operation(client):
        try:
            return await _task_snapshot(client, task_id)
        except A2AError as error:
            if isinstance(error, A2AClientError):
                raise
            raise DeliveryError(f"GetTask refused: {type(error).__name__}: {error.message}") from error

    return _call(endpoint, operation)


# ---------------------------------------------------------------------------------------------------
# Listing parked tasks: the third way Reviewer learns of a request (DESIGN "A2A contract", intake 2)


class ListingRefused(DeliveryError):
    """The agent does not let Reviewer list its tasks: its card does not declare the approval extension,
    or ListTasks is refused (unsupported, or not for Reviewer's identity). Ask again much later."""


@dataclass(frozen=True)
class ParkedPage:
    requests: list[ProposalSubmission]
    malformed: list[tuple[str, PushError]]  # (task id, why): parked with a request Reviewer cannot read
    next_page_token: str
    batches: list[BatchSubmission] = field(default_factory=list)  # tasks parked with a batch instead


def list_parked_requests(agent: Agent, *, page_size: int, page_token: str = "") -> ParkedPage:
    """One page of ListTasks(status=AUTH_REQUIRED): the approval requests (and batches) parked in the
    tasks' status messages, as a push would have carried them. Raises ListingRefused or DeliveryError."""
    endpoint = AgentEndpoint.of(agent)

    # a2a-rust parks an asking task in input-required, Reviewer's extension in auth-required.
    parked = (
        TaskState.TASK_STATE_INPUT_REQUIRED
        if endpoint.speaks_a2a_rust
        else TaskState.TASK_STATE_AUTH_REQUIRED
    )

    async def operation(client, card: AgentCard):
        if not any(extension.uri == endpoint.extension_uri for extension in card.capabilities.extensions):
            raise ListingRefused(f"{endpoint.slug}'s card does not declare {endpoint.extension_uri}")
        request = ListTasksRequest(status=parked, page_size=page_size, page_token=page_token)
        try:
            page = await client.list_tasks(request, context=_extension_context(endpoint))
        except A2AError as error:
            if isinstance(error, A2AClientError):
                raise
            raise ListingRefused(f"ListTasks refused: {type(error).__name__}: {error.message}") from error
        requests, batches, malformed = [], [], []
        for task in page.tasks:
            if task.status.state != parked:
                continue  # an agent that ignores the filter: only parked tasks are requests
            metadata = MessageToDict(task.status.message.metadata)
            try:
                submission = parked_request(endpoint.extension, task.id, task.context_id, metadata)
                batch = None
                if submission is None and endpoint.extension == Agent.ApprovalExtension.REVIEWER:
                    batch = parked_batch(task.id, task.context_id, metadata)
            except PushError as error:
                malformed.append((task.id, error))
                continue
            if submission is not None:
                requests.append(submission)
            elif batch is not None:
                batches.append(batch)
        return ParkedPage(requests, malformed, page.next_page_token, batches)

    return _call(endpoint, operation, with_card=True)
