"""/healthz and /readyz, answered in front of Django, on every Daphne (reviewer/asgi.py, outermost but
for TrustedProxies).

Why before Django: a load balancer or an orchestrator probes each process by its address, over plain
http, with a Host header that is that address. Through Django such a probe would meet ALLOWED_HOSTS
(400 for a Host it does not list), SECURE_SSL_REDIRECT (a 301 to https), the session and CSRF
middleware, and the concurrency limit (a busy process would look dead and be restarted or dropped
together with its peers). Here none of them applies, and nothing here reads a cookie or a body.

- /healthz (liveness): 200 `{"status": "alive"}` from the event loop itself; touches nothing, so it
  fails only when the process is wedged.
- /readyz (readiness): the checks of health/checks.py; 200 `{"status": "ready"}` or 503
  `{"status": "unready", "failing": [...]}`. `?exclude=NAME` (repeatable, as Kubernetes' /readyz) leaves
  checks out: the proxy in deploy/ probes with the background checks excluded, so a stopped worker does
  not take every Daphne out of the pool at once. With `Authorization: Bearer $METRICS_TOKEN` the answer
  also has each check's measurements (latency, ages, counts); without it, only names.
"""

import asyncio
import json
import logging
from urllib.parse import parse_qs

from django.conf import settings

from health import checks
from lib.tokens import bearer_matches

log = logging.getLogger(__name__)

PATHS = ("/healthz", "/readyz")


class HealthProbes:
    """ASGI middleware for the "http" scope: /healthz and /readyz here, everything else to `app`."""

    def __init__(self, app):
        self.app = app
        # What failed at the last probe, per set of excluded checks: logged when it changes, not at every
        # probe (the proxy and a monitor probe different sets).
        self._last_failing: dict[frozenset[str], list[str]] = {}
        # The readiness being computed, per set of checks: probes that arrive meanwhile share it, so a flood
        # of probes (they pass the concurrency limit) costs one set of queries at a time.
        self._running: dict[tuple[str, ...], asyncio.Future] = {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] not in PATHS:
            await self.app(scope, receive, send)
            return
        if scope["method"] not in ("GET", "HEAD"):
            await _answer(send, 405, {"status": "method not allowed"}, [(b"allow", b"GET, HEAD")])
            return
        if scope["path"] == "/healthz":
            await _answer(send, 200, {"status": "alive"})
            return
        exclude = set(parse_qs(scope.get("query_string", b"").decode("latin-1")).get("exclude", []))
        unknown = sorted(exclude - set(checks.CHECKS))
        if unknown:
            await _answer(send, 400, {"status": "bad request", "unknown_checks": unknown})
            return
        readiness = await self._readiness(checks.selected(exclude))
        self._log_change(frozenset(exclude), readiness.failing)
        headers = dict(scope.get("headers") or [])
        authorization = headers.get(b"authorization", b"").decode("latin-1")
        with_details = bearer_matches(authorization, settings.METRICS_TOKEN)
        await _answer(send, 200 if readiness.ready else 503, readiness.body(with_details=with_details))

    async def _readiness(self, names: tuple[str, ...]) -> checks.Readiness:
        running = self._running.get(names)
        if running is None:
            running = asyncio.ensure_future(checks.readiness(names))
            self._running[names] = running
            running.add_done_callback(lambda _: self._running.pop(names, None))
        return await asyncio.shield(running)  # a probe that hangs up does not cancel the others' answer

    def _log_change(self, exclude: frozenset[str], failing: list[str]) -> None:
        if failing != self._last_failing.get(exclude, []):
            if failing:
                log.warning("unready: %s failing", ", ".join(failing))
            else:
                log.info("ready again")
            self._last_failing[exclude] = failing


async def _answer(send, status: int, body: dict, extra_headers=()) -> None:
    content = json.dumps(body).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"cache-control", b"no-store"),
        (b"content-length", str(len(content)).encode()),
        *extra_headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})
