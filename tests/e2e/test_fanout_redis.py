"""Scale-out: two Daphne processes share PostgreSQL/SQLite and the Redis channel layer. A reviewer
watching a proposal on one process sees a vote cast on the other, live over the WebSocket."""

import asyncio
import uuid

import httpx
import pytest
import websockets
from django.conf import settings

from tests import factories
from tests.e2e.conftest import Stack
from tests.examples.harness import stop_processes
from tests.reviewer_processes import daphne, start_all

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.REDIS_URL, reason="needs Redis (REDIS_URL) for the shared channel layer"),
]


@pytest.fixture
def two_reviewer_processes(transactional_db, tmp_path):
    """Two Daphne processes on their own sockets, one channel layer (a prefix of their own in Redis),
    started side by side."""
    prefix = f"fanout-{uuid.uuid4().hex}"
    stacks, processes = [], []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            stack = Stack(tmp_path / name)
            stacks.append(stack)
            env = {**stack.env(), "REDIS_URL": settings.REDIS_URL, "CHANNELS_PREFIX": prefix}
            processes.append(daphne("reviewer", stack.listener, env=env, log_dir=stack.log_dir))
        start_all(processes)
        yield stacks
    finally:
        stop_processes([process.process for process in processes])
        for stack in stacks:
            stack.listener.close()


def signed_in(url: str, user) -> httpx.Client:
    client = httpx.Client(base_url=url, timeout=10)
    client.get("/accounts/login/")
    response = client.post(
        "/accounts/login/",
        data={
            "csrfmiddlewaretoken": client.cookies["csrftoken"],
            "username": user.username,
            "password": factories.PASSWORD,
            "otp_token": factories.totp_code(user),
        },
    )
    assert response.status_code == 302, response.text[:500]
    return client


# redis-py 8 reads with a 5 s socket timeout by default, and channels-redis's blocking pop waits 5 s:
# without the layer's own socket_timeout (reviewer/fixed_settings.py, redis_channel_layers) an idle
# socket died with 1011 after ~5 s.
IDLE_SECONDS = 16


def watch_then_vote(first, second, proposal, watcher, voter, *, idle_seconds: float = 0) -> str:
    """The watcher opens the proposal's socket on `first`, stays idle for `idle_seconds` (the socket must
    stay open and quiet), then the voter approves on `second`; returns the update the watcher receives."""
    watching = signed_in(first.url, watcher)
    voting = signed_in(second.url, voter)
    code = factories.totp_code(voter)  # read here: the coroutine below must not touch the database
    cookie = "; ".join(f"{name}={value}" for name, value in watching.cookies.items())

    async def run() -> str:
        socket_url = first.url.replace("http://", "ws://") + f"/ws/proposals/{proposal.id}/"
        async with websockets.connect(
            socket_url, additional_headers={"Cookie": cookie}, origin=first.url
        ) as socket:
            await asyncio.wait_for(socket.recv(), timeout=10)  # the page's state as of the connect
            if idle_seconds:
                # Nothing happens for idle_seconds: recv() must time out, not fail with a closed socket.
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(socket.recv(), timeout=idle_seconds)
            decided = await asyncio.to_thread(
                voting.post,
                f"/proposals/{proposal.id}/decide",
                data={
                    "csrfmiddlewaretoken": voting.cookies["csrftoken"],
                    "action": "approve",
                    "digest": proposal.action_digest,
                    "otp_code": code,
                },
            )
            assert decided.status_code == 302, decided.text[:500]
            update = await asyncio.wait_for(socket.recv(), timeout=10)
            assert isinstance(update, str)  # the pages' updates are text frames
            return update

    try:
        return asyncio.run(run())
    finally:
        watching.close()
        voting.close()


def _two_finance_reviewers(tenant, agent):
    watcher = factories.make_user("watcher", tenant=tenant, groups=["finance"], first_name="Wanda")
    voter = factories.make_user("voter", tenant=tenant, groups=["finance"], first_name="Victor")
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 2}]
    )
    return watcher, voter, factories.submit(agent)


def test_a_vote_on_one_process_reaches_a_viewer_on_the_other(two_reviewer_processes, tenant, agent):
    first, second = two_reviewer_processes
    watcher, voter, proposal = _two_finance_reviewers(tenant, agent)

    update = watch_then_vote(first, second, proposal, watcher, voter)

    assert "Victor" in update  # the watcher's page shows the other process's vote


def test_an_idle_socket_stays_open_and_still_receives_updates(two_reviewer_processes, tenant, agent):
    first, second = two_reviewer_processes
    watcher, voter, proposal = _two_finance_reviewers(tenant, agent)

    update = watch_then_vote(first, second, proposal, watcher, voter, idle_seconds=IDLE_SECONDS)

    assert "Victor" in update  # live after 16 s of silence, over Redis, across processes
