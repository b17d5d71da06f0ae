"""Overload degrades, and people come before agents: past its share of requests in flight
(AGENT_CONCURRENCY_LIMIT, PEOPLE_CONCURRENCY_LIMIT), Reviewer answers 503 with Retry-After at once
(reviewer/overload.py), and agents can never take a person's slot. The clients this project ships
retry with backoff until Reviewer takes the request: reviewer_gate.ReviewerClient
(sdk/python/tests/test_client.py, test_submit_and_pull_are_retried_on_503), which the demo agent uses."""

import asyncio
import json
import os
import subprocess
import sys
import uuid

import pytest
from django.urls import reverse

from reviewer.overload import ConcurrencyLimit, share_of

# Fixed, not uuid4(): pytest-xdist needs the same test ids in every process.
PROPOSAL = uuid.UUID("0f768986-3050-44a1-af65-a091052bcd59")
INTAKE = "/api/v1/proposals"
QUEUE = "/"
VOTE = f"/proposals/{PROPOSAL}/decide"
HOST = [(b"host", b"testserver")]


class HeldApp:
    """An ASGI app whose requests wait until released: requests in flight, on demand."""

    def __init__(self):
        self.release = asyncio.Event()
        self.entered: list[str] = []  # the paths that reached the app, in order

    async def __call__(self, scope, receive, send):
        self.entered.append(scope["path"])
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def until_entered(self, count: int) -> None:
        while len(self.entered) < count:
            await asyncio.sleep(0)  # let the held requests enter (a yield, not a wait for time)


async def request(app, path=INTAKE, method="POST") -> tuple[int, dict, bytes]:
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await app({"type": "http", "method": method, "path": path, "headers": []}, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), body


async def test_agents_past_their_limit_get_503_with_retry_after_and_never_reach_django():
    inner = HeldApp()
    app = ConcurrencyLimit(inner, agents=2, people=1)
    held = [asyncio.create_task(request(app)) for _ in range(2)]
    await inner.until_entered(2)

    status, headers, body = await request(app)

    assert status == 503
    assert headers[b"retry-after"] == b"1"
    assert json.loads(body)["error"]["code"] == "overloaded"
    assert len(inner.entered) == 2  # the refused request never reached the app (nor the database)
    inner.release.set()
    assert [(await task)[0] for task in held] == [200, 200]
    inner.release = asyncio.Event()
    inner.release.set()
    assert (await request(app))[0] == 200  # capacity is back once they finished


async def test_reviewers_pages_sign_in_and_votes_pass_while_agents_hold_every_slot_they_have(settings):
    # The settings as a deployment that set only the old single limit reads them (12 + 4 of 16).
    settings.MAX_CONCURRENT_REQUESTS = 16
    settings.AGENT_CONCURRENCY_LIMIT = 12
    settings.PEOPLE_CONCURRENCY_LIMIT = 4
    inner = HeldApp()
    app = ConcurrencyLimit(inner)
    agents = [asyncio.create_task(request(app, INTAKE)) for _ in range(16)]
    await inner.until_entered(12)  # the agents' twelve slots are full; the other four were refused

    people = [
        asyncio.create_task(request(app, QUEUE, "GET")),
        asyncio.create_task(request(app, "/accounts/login/", "POST")),
        asyncio.create_task(request(app, VOTE, "POST")),
    ]
    await inner.until_entered(15)
    refused_agent = await request(app, "/a2a/push/refund-agent/", "POST")
    inner.release.set()

    assert [(await task)[0] for task in people] == [200, 200, 200]
    assert sorted([(await task)[0] for task in agents]) == [200] * 12 + [503] * 4
    assert (refused_agent[0], refused_agent[1][b"retry-after"]) == (503, b"1")
    assert json.loads(refused_agent[2])["error"]["code"] == "overloaded"


async def test_people_past_their_own_limit_get_503_and_agents_still_pass():
    inner = HeldApp()
    app = ConcurrencyLimit(inner, agents=1, people=2)
    people = [asyncio.create_task(request(app, QUEUE, "GET")) for _ in range(2)]
    await inner.until_entered(2)

    refused = await request(app, VOTE)
    agent = asyncio.create_task(request(app, INTAKE))
    await inner.until_entered(3)
    inner.release.set()

    assert (refused[0], refused[1][b"retry-after"]) == (503, b"1")
    assert (await agent)[0] == 200
    assert [(await task)[0] for task in people] == [200, 200]
    assert inner.entered == [QUEUE, QUEUE, INTAKE]


async def test_a_share_with_limit_0_is_unlimited_and_the_other_keeps_its_own():
    inner = HeldApp()
    app = ConcurrencyLimit(inner, agents=0, people=1)
    agents = [asyncio.create_task(request(app, INTAKE)) for _ in range(5)]
    person = asyncio.create_task(request(app, QUEUE, "GET"))
    await inner.until_entered(6)

    refused = await request(app, QUEUE, "GET")
    inner.release.set()

    assert refused[0] == 503
    assert [(await task)[0] for task in [*agents, person]] == [200] * 6


async def test_websockets_are_not_counted():
    calls = []

    async def inner(scope, receive, send):
        calls.append(scope["type"])

    app = ConcurrencyLimit(inner, agents=1, people=1)
    app.in_flight = {"agents": 1, "people": 1}
    await app({"type": "websocket", "path": "/ws/queue/"}, None, None)  # type: ignore[arg-type]  # unread

    assert calls == ["websocket"]


async def test_static_files_are_not_counted():
    """A page asks for its css and scripts at once, more than people's share has slots: each must load
    (the demo's pages got 503 for their own scripts when static files took people's slots)."""
    held = HeldApp()

    async def inner(scope, receive, send):
        if scope["path"].startswith("/static/"):
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"asset"})
        else:
            await held(scope, receive, send)

    app = ConcurrencyLimit(inner, agents=1, people=1)
    page = asyncio.create_task(request(app, QUEUE, "GET"))
    await held.until_entered(1)  # people's one slot is taken by the page

    assets = [await request(app, f"/static/js/{name}.js", "GET") for name in ("a", "b", "c")]
    refused = await request(app, VOTE)
    held.release.set()

    assert [status for status, _, _ in assets] == [200, 200, 200]
    assert refused[0] == 503  # the share itself is still full
    assert (await page)[0] == 200


@pytest.mark.parametrize(
    ("path", "share"),
    [
        (INTAKE, "agents"),
        (f"/api/v1/proposals/{PROPOSAL}/decision", "agents"),
        (f"/api/v1/decisions/{PROPOSAL}/consume", "agents"),
        (reverse("approvals:push", args=["refund-agent"]), "agents"),
        (reverse("approvals:jwks"), "agents"),
        (reverse("approvals:queue"), "people"),
        (reverse("approvals:detail", args=[PROPOSAL]), "people"),
        (reverse("approvals:decide", args=[PROPOSAL]), "people"),
        (reverse("approvals:passkey_challenge", args=[PROPOSAL]), "people"),
        (reverse("login"), "people"),
        (reverse("sso:callback"), "people"),
        (reverse("approvals:slack_interactivity"), "people"),  # a person's click, relayed by Slack
        ("/admin/", "people"),
        ("/audit/", "people"),
        ("/scim/v2/Users", "people"),
        ("/metrics", "people"),
    ],
)
def test_agent_facing_paths_take_agents_slots_and_every_other_takes_peoples(path, share):
    assert share_of(path) == share


def test_by_default_the_two_limits_share_the_single_limit_and_the_pool_keeps_its_size():
    """A deployment that sets only MAX_CONCURRENT_REQUESTS keeps its total of requests and connections."""
    script = (
        "import reviewer.settings as s; print(s.AGENT_CONCURRENCY_LIMIT, s.PEOPLE_CONCURRENCY_LIMIT,"
        " s.DB_POOL_MAX_SIZE - s.DECISION_WAIT_READS - s.OUTBOX_DIRECT_SEND_THREADS - 4)"
    )
    environment = {k: v for k, v in os.environ.items() if "CONCURRENCY_LIMIT" not in k}
    environment.pop("DB_POOL_MAX_SIZE", None)

    def limits(total: str) -> list[int]:
        result = subprocess.run(  # noqa: S603 (our own interpreter and settings)
            [sys.executable, "-c", script],
            env={**environment, "MAX_CONCURRENT_REQUESTS": total, "OUTBOX_DIRECT_SEND": "true"},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return [int(n) for n in result.stdout.split()]

    assert limits("16") == [12, 4, 16]
    assert limits("4") == [2, 2, 4]
    assert limits("2") == [1, 2, 3]  # people keep 2, agents 1: the one total that grows


@pytest.mark.django_db(transaction=True)
async def test_through_the_real_application_the_sign_in_page_answers_while_agents_fill_their_share():
    """The wiring in reviewer/asgi.py: the limit stands in front of Django for both shares."""
    from channels.testing import HttpCommunicator

    from reviewer.asgi import application

    limit = application.app.app.application_mapping["http"].app  # TrustedProxies, HealthProbes, the router
    assert isinstance(limit, ConcurrencyLimit)
    limit.in_flight["agents"] += limit.limits["agents"]  # as many agents' requests as it takes, running
    try:
        page = await HttpCommunicator(application, "GET", "/accounts/login/", headers=HOST).get_response(
            timeout=30
        )
        agent = await HttpCommunicator(application, "POST", INTAKE, body=b"{}", headers=HOST).get_response(
            timeout=30
        )
    finally:
        limit.in_flight["agents"] -= limit.limits["agents"]

    assert page["status"] == 200
    assert (agent["status"], dict(agent["headers"])[b"retry-after"]) == (503, b"1")
    assert json.loads(agent["body"])["error"]["code"] == "overloaded"
