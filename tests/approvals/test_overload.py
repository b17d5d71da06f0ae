"""Overload degrades: past MAX_CONCURRENT_REQUESTS requests in flight, Reviewer answers 503 with
Retry-After at once (reviewer/overload.py). The clients this project ships retry with backoff until
Reviewer takes the request: reviewer_gate.ReviewerClient (sdk/python/tests/test_client.py,
test_submit_and_pull_are_retried_on_503), which the demo agent uses."""

import asyncio
import json

from reviewer.overload import ConcurrencyLimit


class HeldApp:
    """An ASGI app whose requests wait until released: requests in flight, on demand."""

    def __init__(self):
        self.release = asyncio.Event()
        self.entered = 0

    async def __call__(self, scope, receive, send):
        self.entered += 1
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def request(app, path="/api/v1/proposals") -> tuple[int, dict, bytes]:
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await app({"type": "http", "method": "POST", "path": path, "headers": []}, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), body


async def test_past_the_limit_a_request_gets_503_with_retry_after_and_never_reaches_django():
    inner = HeldApp()
    app = ConcurrencyLimit(inner, limit=2)
    held = [asyncio.create_task(request(app)) for _ in range(2)]
    while inner.entered < 2:
        await asyncio.sleep(0)  # let the two held requests enter

    status, headers, body = await request(app)

    assert status == 503
    assert headers[b"retry-after"] == b"1"
    assert json.loads(body)["error"]["code"] == "overloaded"
    assert inner.entered == 2  # the refused request never reached the app (nor the database)
    inner.release.set()
    assert [(await task)[0] for task in held] == [200, 200]
    inner.release = asyncio.Event()
    inner.release.set()
    assert (await request(app))[0] == 200  # capacity is back once they finished


async def test_websockets_are_not_counted():
    calls = []

    async def inner(scope, receive, send):
        calls.append(scope["type"])

    app = ConcurrencyLimit(inner, limit=0)
    await app({"type": "websocket"}, None, None)
    app = ConcurrencyLimit(inner, limit=1)
    app.in_flight = 1
    await app({"type": "websocket"}, None, None)

    assert calls == ["websocket", "websocket"]
