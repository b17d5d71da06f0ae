"""/healthz and /readyz through the real ASGI application (reviewer/asgi.py): liveness touches nothing,
readiness names what fails, details only for the metrics token, and neither meets ALLOWED_HOSTS, the
https redirect or the concurrency limit the way a page does."""

import asyncio
import json
from datetime import timedelta

import pytest
from django.utils import timezone

from health import checks, heartbeats
from health.models import WorkerHeartbeat
from reviewer.asgi import application


async def get(path: str, *, query: bytes = b"", headers=(), method: str = "GET", app=application):
    sent, requests = [], [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive():
        if requests:
            return requests.pop()
        await asyncio.Event().wait()  # the client stays connected until the answer

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": method,
        "scheme": "http",
        "path": path,
        "query_string": query,
        # A load balancer probes the process by its address: a Host no ALLOWED_HOSTS lists.
        "headers": [(b"host", b"10.1.2.3:8000"), *headers],
        "client": ("10.1.2.1", 40000),
        "server": ("10.1.2.3", 8000),
    }
    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), body


def body_of(answer) -> dict:
    return json.loads(answer[2])


async def test_liveness_answers_without_the_database():
    """No django_db mark: any query would raise."""
    status, headers, body = await get("/healthz")
    assert (status, json.loads(body)) == (200, {"status": "alive"})
    assert headers[b"cache-control"] == b"no-store"


async def test_a_probe_is_answered_despite_the_https_redirect_and_an_unlisted_host(settings):
    settings.SECURE_SSL_REDIRECT = True
    assert (await get("/healthz"))[0] == 200
    page = await get("/.well-known/jwks.json")
    assert page[0] in (301, 400)  # what the same probe of a page meets


async def test_probes_take_only_get_and_head():
    status, headers, _ = await get("/readyz", method="POST")
    assert status == 405 and headers[b"allow"] == b"GET, HEAD"


async def test_an_unknown_check_to_exclude_is_refused():
    answer = await get("/readyz", query=b"exclude=workr")
    assert answer[0] == 400 and body_of(answer)["unknown_checks"] == ["workr"]


@pytest.mark.django_db(transaction=True)
async def test_ready_when_a_worker_ticked_and_nothing_waits(settings):
    settings.METRICS_TOKEN = "scrape-secret"
    await _record_tick()
    answer = await get("/readyz")
    assert (answer[0], body_of(answer)) == (200, {"status": "ready"})  # no measurements without the token


@pytest.mark.django_db(transaction=True)
async def test_unready_naming_the_worker_when_none_ticked_recently(settings):
    settings.READY_WORKER_TICK_MAX_SECONDS = 60
    await _create_heartbeat(ticked=timezone.now() - timedelta(seconds=61))
    answer = await get("/readyz")
    assert (answer[0], body_of(answer)) == (503, {"status": "unready", "failing": ["worker"]})


@pytest.mark.django_db(transaction=True)
async def test_the_metrics_token_adds_each_checks_measurements(settings):
    settings.METRICS_TOKEN = "scrape-secret"
    answer = await get("/readyz", headers=[(b"authorization", b"Bearer scrape-secret")])
    body = body_of(answer)
    assert body["failing"] == ["worker"]  # no worker ever ticked
    assert set(body["checks"]) == set(checks.selected(set()))
    assert body["checks"]["worker"] == {"ok": False, "seconds": body["checks"]["worker"]["seconds"]} | {
        "last_tick_age_seconds": None
    }
    assert body["checks"]["outbox"]["due_messages"] == 0
    wrong = await get("/readyz", headers=[(b"authorization", b"Bearer nope")])
    assert "checks" not in body_of(wrong)


@pytest.mark.django_db(transaction=True)
async def test_excluded_checks_do_not_count():
    answer = await get("/readyz", query=b"exclude=worker&exclude=sequencer&exclude=outbox")
    assert (answer[0], body_of(answer)) == (200, {"status": "ready"})


async def _record_tick():
    from asgiref.sync import sync_to_async

    await sync_to_async(heartbeats.record_tick)()


async def _create_heartbeat(*, ticked):
    from asgiref.sync import sync_to_async

    await sync_to_async(WorkerHeartbeat.objects.create)(
        host="elsewhere", pid=1, started_at=ticked, ticked_at=ticked
    )


async def test_probes_that_arrive_together_share_one_run_of_the_checks(monkeypatch):
    """/readyz passes the concurrency limit, so a flood of probes must not cost a flood of queries."""
    from health.probes import HealthProbes

    release, runs = asyncio.Event(), []

    async def held_readiness(names, now=None):
        runs.append(names)
        await release.wait()
        return checks.Readiness([checks.Result("database", True)])

    monkeypatch.setattr(checks, "readiness", held_readiness)
    probes = HealthProbes(app=None)
    waiting = [asyncio.ensure_future(get("/readyz", app=probes)) for _ in range(5)]
    while not runs:
        await asyncio.sleep(0)  # let the probes arrive
    release.set()
    answers = await asyncio.gather(*waiting)
    assert [answer[0] for answer in answers] == [200] * 5
    assert len(runs) == 1
    assert (await get("/readyz", app=probes))[0] == 200 and len(runs) == 2  # the next probe checks again
