"""Overload degrades, never fails: at most MAX_CONCURRENT_REQUESTS HTTP requests run at once in one
Daphne process; the next one is answered at once with 503 and `Retry-After`, before anything reaches the
database.

Why here, in front of Django: every request Django runs holds a database connection until it ends, and
Daphne starts a request for every connection it accepts. Without a limit a burst opens connections until
PostgreSQL refuses them and requests fail with 500. With it, HTTP requests hold at most
MAX_CONCURRENT_REQUESTS connections per process, drawn from its pool of DB_POOL_MAX_SIZE (the limit + 3:
settings.py, README "Running several processes" for PostgreSQL's max_connections), and callers retry
after the pause they were told. WebSockets are not counted:
an open page holds no connection while idle, only while it re-reads.

A refused request did nothing: it is safe to send again as is (intake is idempotent on request_id
anyway).
"""

import json

from django.conf import settings

from lib.errors import error_body

RETRY_AFTER_SECONDS = 1


class ConcurrencyLimit:
    """ASGI middleware for the "http" scope: a counter, not a queue (a queue would only move the wait)."""

    def __init__(self, app, limit: int | None = None):
        self.app = app
        self.limit = limit if limit is not None else settings.MAX_CONCURRENT_REQUESTS
        self.in_flight = 0  # one event loop per process: no lock needed

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or self.limit <= 0:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            await self.refuse(send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1

    @staticmethod
    async def refuse(send) -> None:
        body = json.dumps(
            error_body("overloaded", f"Reviewer is at capacity; retry after {RETRY_AFTER_SECONDS} s")
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 503,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"retry-after", str(RETRY_AFTER_SECONDS).encode()),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
