"""Overload degrades, never fails, and people come before agents: one Daphne process runs at most
AGENT_CONCURRENCY_LIMIT agents' HTTP requests and, apart from them, at most PEOPLE_CONCURRENCY_LIMIT
of everyone else's (reviewers' pages, sign-in, votes). The next request of a share that is full is
answered at once with 503 and `Retry-After`, before anything reaches the database.

Why here, in front of Django: every request Django runs holds a database connection until it ends, and
Daphne starts a request for every connection it accepts. Without a limit a burst opens connections until
PostgreSQL refuses them and requests fail with 500. With it, HTTP requests hold at most the two limits'
sum of connections per process, drawn from its pool of DB_POOL_MAX_SIZE (that sum + the process's
other threads: settings.py, README "Running several processes" for PostgreSQL's max_connections), and
callers retry after the pause they were told. WebSockets are not counted: an open page holds no
connection while idle, only while it re-reads. Nor are static files (STATIC_URL): they never touch the
database, and a page asks for its css and scripts all at once, more of them than people's share has
slots, so counting them refused a page its own scripts (503) on the embedded default, where Daphne
serves them.

Why two counters and not one: with one shared limit, agents at four times the knee (`make load`) took
every slot and reviewers' pages and votes got 503. Agents retry by contract (the SDKs wait out
`Retry-After`); a person at a page should not have to. So agents have their own slots and can never
take a person's; people can still be refused when people fill their own.

A refused request did nothing: it is safe to send again as is (intake is idempotent on request_id
anyway).
"""

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from django.conf import settings

from lib.errors import error_body
from reviewer.static_files import url_prefix as static_url_prefix

RETRY_AFTER_SECONDS = 1

Share = Literal["agents", "people"]
# ASGI as Django's own handler is typed (the django-stubs signature), so it and Channels' apps fit.
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# What agents call: the REST API (intake, pull, consume, outcome), the A2A push webhook, the JWKS
# their gates verify decisions with, AuthZEN's evaluations, and the OAuth doors (oauth/urls.py: TAC,
# CIBA, their metadata).
AGENT_PATHS = (
    "/api/",
    "/a2a/",
    "/access/",
    "/.well-known/jwks.json",
    "/.well-known/authzen-configuration",
    "/oauth/",
    "/bc-authorize",
    "/.well-known/oauth-authorization-server",
)


def share_of(path: str) -> Share:
    """Whose slots a request takes. Agent-facing paths are listed and everything else is people's, so a
    page added later is never refused because agents are busy: the mistake this direction allows is an
    agent endpoint counted with people until it is listed, not a person refused for agents. People's
    share is also what an operator and an identity provider use (the admin, the audit pages, SCIM
    provisioning, /metrics) and what a person's click sends through Slack (its interactivity
    requests): none of them may wait on agents."""
    return "agents" if path.startswith(AGENT_PATHS) else "people"


class ConcurrencyLimit:
    """ASGI middleware for the "http" scope: one counter per share, not a queue (a queue would only move
    the wait). A limit of 0 leaves that share unlimited."""

    def __init__(self, app: ASGIApp, *, agents: int | None = None, people: int | None = None) -> None:
        self.app = app
        self.limits: dict[Share, int] = {
            "agents": agents if agents is not None else settings.AGENT_CONCURRENCY_LIMIT,
            "people": people if people is not None else settings.PEOPLE_CONCURRENCY_LIMIT,
        }
        # one event loop per process: no lock needed
        self.in_flight: dict[Share, int] = {"agents": 0, "people": 0}
        # Static files (css, scripts, images) are served without the database: never counted.
        self.static_prefix = static_url_prefix()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(self.static_prefix):
            await self.app(scope, receive, send)
            return
        share = share_of(scope["path"])
        limit = self.limits[share]
        if limit <= 0:
            await self.app(scope, receive, send)
            return
        if self.in_flight[share] >= limit:
            await self.refuse(send)
            return
        self.in_flight[share] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight[share] -= 1

    @staticmethod
    async def refuse(send: Send) -> None:
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
