"""The guard as ASGI middleware (Starlette, FastAPI, any ASGI app): no dependency beyond the ASGI spec.

    app = FastAPI()
    app.add_middleware(ReviewerGateMiddleware, guard=guard)      # or ReviewerGateMiddleware(app, guard=guard)

A protected request's body is read whole (at most `max_body_bytes`, else 413) before anything runs,
handed to the guard, and given unchanged to the app only when the guard releases it. The handler finds
the verified decision in `request.state.reviewer_decision` (Starlette) or `scope["state"]`; its
`jti` is the downstream idempotency key. After the app answers, its status is reported to Reviewer as
the outcome (the guard's `settle`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from reviewer_gate.resource.answers import Answer
from reviewer_gate.resource.guard import Release, ResourceGuard
from reviewer_gate.resource.routes import ProtectedRequest

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DEFAULT_MAX_BODY_BYTES = 1024 * 1024


class BodyTooLarge(Exception):
    pass


async def read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def request_from_scope(scope: Scope, body: bytes) -> ProtectedRequest:
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", []):
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return ProtectedRequest(
        method=scope["method"],
        path=scope["path"],
        query=scope.get("query_string", b"").decode("latin-1"),
        headers=headers,
        body=body,
    )


async def send_answer(send: Send, answer: Answer) -> None:
    headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in answer.headers]
    headers.append((b"content-length", str(len(answer.body)).encode()))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})


def replaying(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the app the body already read, then the real channel (disconnects)."""
    sent = False

    async def receive_again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return receive_again


class ReviewerGateMiddleware:
    def __init__(self, app: ASGIApp, *, guard: ResourceGuard, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES):
        self.app = app
        self.guard = guard
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.guard.concerns(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        try:
            body = await read_body(receive, self.max_body_bytes)
        except BodyTooLarge:
            await send_answer(
                send, Answer.json(413, {"error": "invalid_request", "error_description": "body too large"})
            )
            return
        verdict = await asyncio.to_thread(self.guard.handle, request_from_scope(scope, body))
        if verdict is None:
            await self.app(scope, replaying(body, receive), send)
        elif isinstance(verdict, Answer):
            await send_answer(send, verdict)
        else:
            await self._run(verdict, scope, replaying(body, receive), send)

    async def _run(self, release: Release, scope: Scope, receive: Receive, send: Send) -> None:
        status: int | None = None

        async def send_and_watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        released_scope = dict(scope)
        released_scope["state"] = {**scope.get("state", {}), "reviewer_decision": release.decision}
        try:
            await self.app(released_scope, receive, send_and_watch)
        except BaseException:
            await asyncio.to_thread(self.guard.settle, release, None)
            raise
        await asyncio.to_thread(self.guard.settle, release, status)
