"""The decision pull, `GET /api/v1/proposals/<id>/decision?wait=<seconds>`, served on the event loop: a
wait costs a socket and a channel-layer subscription, never a request slot, a thread or a database
connection.

Why not a Django view: a view holds one of the process's MAX_CONCURRENT_REQUESTS slots
(reviewer/overload.py) and a thread for as long as it runs, so sixteen agents waiting for their
reviewers (the SDK long-polls by design) would answer every page, sign-in and intake of every tenant
with 503 until their waits end. So this small ASGI app sits in front of the limit (reviewer/asgi.py) and
answers the pull itself:

1. authenticate the agent and read the answer (pull.latest_with_decision, pull.answer), each a short
   read in a worker thread, at most READ_SLOTS of them at once per process, so waits can never take
   the connections pages and intake need;
2. if there is no decision yet, subscribe to the proposal's channel-layer group (events.proposal_group:
   every transition of the proposal is announced there after commit, from any process through Redis)
   and sleep on it: no polling;
3. on a wake-up, read again (a reviewer's edit moves the wait to the new proposal's group); when `wait`
   ends, read once more and answer what is there.

A wake-up that is lost (Redis restarting) costs the agent one wait: the read at the deadline answers
the state, and the client asks again. Waits are capped per agent and per process
(DECISION_WAITS_PER_AGENT, DECISION_WAITS_PER_PROCESS): past the agent's cap the answer is 429
`too_many_waits` with Retry-After, past the process's 503 `overloaded`, both at once and without a
read. The Django operation in pull.py stays for the OpenAPI document and answers the same shape.
"""

import asyncio
import contextlib
import json
import re
import uuid
from collections import Counter
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings

from approvals import events
from approvals.agent_api import pull
from approvals.agent_api.api import AgentToken
from approvals.states import TERMINAL
from lib import group_listeners as listeners
from lib.errors import error_body

PATH = re.compile(r"^/api/v1/proposals/(?P<proposal_id>[^/]+)/decision/?$")
RETRY_AFTER_SECONDS = 5  # a wait ends within MAX_WAIT_SECONDS; most end much sooner, on a decision


class HungUp(Exception):
    """The agent closed the connection while it waited."""


class DecisionWaits:
    """ASGI middleware for the "http" scope: answers GET/HEAD on the decision path itself, passes the
    rest to `app` (the concurrency-limited Django application)."""

    def __init__(self, app, *, per_agent: int | None = None, per_process: int | None = None):
        self.app = app
        self.per_agent = per_agent if per_agent is not None else settings.DECISION_WAITS_PER_AGENT
        self.per_process = per_process if per_process is not None else settings.DECISION_WAITS_PER_PROCESS
        # agent id -> open pulls; one event loop per process: no lock needed
        self.waiting: Counter[int] = Counter()
        # proposal id -> waits asleep on its group (what tests observe)
        self.subscribed: Counter[str] = Counter()
        # asyncio.Semaphore(READ_SLOTS), made on the loop that uses it
        self._reads: asyncio.Semaphore | None = None

    async def __call__(self, scope, receive, send):
        match = PATH.match(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None or scope.get("method") not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        try:
            status, body, headers = await self.answer(scope, receive, match["proposal_id"])
        except HungUp:
            return  # nobody is left to answer
        await _respond(send, status, body, headers, head=scope["method"] == "HEAD")

    async def answer(self, scope, receive, proposal_id: str) -> tuple[int, dict, dict]:
        if sum(self.waiting.values()) >= self.per_process:
            return _refusal(503, "overloaded", "Reviewer is at capacity for waits; retry after", None)
        wait = _wait_of(scope)
        if wait is None:
            return 400, error_body("invalid", _WAIT_MESSAGE, "wait"), {}
        token = _bearer(scope)
        agent = await self.read(AgentToken().authenticate, None, token) if token else None
        if agent is None:
            message = "send this agent's API token as 'Authorization: Bearer <token>'"
            return 401, error_body("unauthorized", message), {}
        try:
            wanted = uuid.UUID(proposal_id)
        except ValueError:
            return 404, error_body("not_found", "not found"), {}
        if self.waiting[agent.id] >= self.per_agent:
            message = f"this agent already has {self.per_agent} decision waits open; retry after"
            return _refusal(429, "too_many_waits", message, "wait")
        self.waiting[agent.id] += 1
        try:
            body = await self.wait_for_decision(agent, wanted, wait, receive)
        finally:
            self.waiting[agent.id] -= 1
            if not self.waiting[agent.id]:
                del self.waiting[agent.id]
        if body is None:
            return 404, error_body("not_found", "not found"), {}
        return 200, body, {}

    async def wait_for_decision(self, agent, wanted: uuid.UUID, wait: int, receive) -> dict | None:
        """The pull's answer, waiting up to `wait` seconds for a decision; None if the agent has no
        such proposal."""
        body = await self.read(_read_answer, agent, wanted)
        if body is None or _final(body) or wait == 0:
            return body
        layer = get_channel_layer()
        if layer is None:  # no channel layer configured: nothing can wake a wait, answer now
            return body
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        channel = await layer.new_channel()
        group: str | None = None
        subscribed_to = ""  # the proposal whose group this wait is in, while `group` is set
        disconnected = asyncio.ensure_future(_disconnect(receive))
        try:
            while True:
                if group != events.proposal_group(body["proposal_id"]):
                    if group is not None:
                        left, group = group, None
                        self._unsubscribe(subscribed_to)
                        await layer.group_discard(left, channel)
                        await _stop_listening(channel, left)
                    # Registered as a listener of the group (lib/group_listeners.py) before the read
                    # below, as the group is joined: a change committed after it is sent here.
                    joining = events.proposal_group(body["proposal_id"])
                    await sync_to_async(listeners.join, thread_sensitive=False)(channel, [joining])
                    subscribed_to, group = body["proposal_id"], joining
                    self.subscribed[subscribed_to] += 1
                    await layer.group_add(group, channel)
                    # Subscribed before this read: a decision committed since the last one is seen here,
                    # or announced to the channel.
                    body = await self.read(_read_answer, agent, wanted)
                    if body is None or _final(body):
                        return body
                    continue
                remaining = deadline - loop.time()
                if remaining <= 0 or not await _woken(layer, channel, remaining, disconnected):
                    return await self.read(_read_answer, agent, wanted)
                body = await self.read(_read_answer, agent, wanted)
                if body is None or _final(body):
                    return body
        finally:
            disconnected.cancel()
            if group is not None:
                self._unsubscribe(subscribed_to)
                with contextlib.suppress(Exception):  # the layer is only a hint; never fail the answer
                    await layer.group_discard(group, channel)
                await _stop_listening(channel, group)

    def _unsubscribe(self, proposal_id: str) -> None:
        self.subscribed[proposal_id] -= 1
        if not self.subscribed[proposal_id]:
            del self.subscribed[proposal_id]

    async def read(self, function, *args):
        """Run a short database read in a worker thread, at most READ_SLOTS at once in this process."""
        if self._reads is None:
            self._reads = asyncio.Semaphore(settings.DECISION_WAIT_READS)
        async with self._reads:
            return await database_sync_to_async(function, thread_sensitive=False)(*args)


def _read_answer(agent, wanted: uuid.UUID) -> dict | None:
    try:
        return pull.answer(pull.latest_with_decision(agent, wanted))
    except pull.NoSuchProposal:
        return None


def _final(body: dict) -> bool:
    return bool(body["token"]) or body["state"] in TERMINAL


async def _stop_listening(channel: str, group: str) -> None:
    """Unregister the wait from the group (logged, never raised: its entry expires)."""
    await sync_to_async(listeners.leave, thread_sensitive=False)(channel, [group])


async def _woken(layer, channel: str, timeout: float, disconnected: asyncio.Future) -> bool:
    """True when a message reached the channel within `timeout`; False when the time ran out. Raises
    HungUp when the agent closed the connection."""
    message = asyncio.ensure_future(layer.receive(channel))
    try:
        done, _ = await asyncio.wait(
            {message, disconnected}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        if not message.done():
            message.cancel()
    if disconnected in done:
        raise HungUp
    return message in done


async def _disconnect(receive) -> None:
    """Returns once the client has gone (the request body, if any, is read and dropped)."""
    while (await receive())["type"] != "http.disconnect":
        pass


_WAIT_MESSAGE = f"wait is a whole number of seconds from 0 to {pull.MAX_WAIT_SECONDS}"


def _wait_of(scope) -> int | None:
    values = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True).get("wait")
    if not values:
        return 0
    try:
        wait = int(values[-1])
    except ValueError:
        return None
    return wait if 0 <= wait <= pull.MAX_WAIT_SECONDS else None


def _bearer(scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return ""


def _refusal(status: int, code: str, message: str, field) -> tuple[int, dict, dict]:
    return (
        status,
        error_body(code, f"{message} {RETRY_AFTER_SECONDS} s", field),
        {"retry-after": str(RETRY_AFTER_SECONDS)},
    )


async def _respond(send, status: int, body: dict, headers: dict, *, head: bool) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"cache-control", b"no-store"),
                *((name.encode(), value.encode()) for name, value in headers.items()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b"" if head else payload})
