"""R9: what the resource kit costs a protected API on an allowed call, against the same call unprotected.

A FastAPI refund service under uvicorn on loopback, with two routes to one handler: `/refunds/{id}`
protected by `ReviewerGateMiddleware` (the 202 mode: the guard files the request asking intake to
consume (`Prefer: consume`), Reviewer's policy allows it at intake and consumes the decision for it,
the decision in the intake answer is verified, then the handler runs; the outcome is reported after the
answer was sent), and `/plain/refunds/{id}` with no guard.
Each protected call carries a new `Idempotency-Key`, so each is a new request (a new proposal).

Reviewer is real: one Daphne on a scratch PostgreSQL database (bench/settings.py) and one `run_worker`
beside it, as deployed; the service is registered as a pull agent with an allow policy. The client
alternates one plain and one protected call (CALLS per round, ROUNDS rounds), so the machine's other
load falls on both. Target: p50 ≤ 3x.

What the protected call's time is made of: the bench times the guard's one request to Reviewer on the
call's path (the intake, which consumes, as the kit's HTTP client sees it: the round trip and
Reviewer's server time; a consume call would be timed too, and the bench stops if one is made) and the
outcome it reports after the answer. R9k (info) is the rest, the guard's own work with the service and
the client around it, against the same unprotected call; the note gives the floor, the ratio a guard
that cost nothing would show: (unprotected + Reviewer's request) / unprotected.
"""

import os
import threading
import time
import uuid

import httpx

from bench.common import ms, percentile, scratch_environment, setup_django, start_worker, stop_process
from bench.r3_intake_http import free_port, start_daphne

CALLS = int(os.environ.get("BENCH_R9_CALLS", "40"))
ROUNDS = 2
API_TOKEN = "bench-resource-token"  # noqa: S105 (a scratch registration's token on a scratch database)
CALLER_KEY = "bench-caller-key"  # noqa: S105 (the service's own caller key, loopback only)
BODY = {"amount": "40.00", "currency": "EUR"}


def refund_service(audience: str, reviewer_url: str, issuer: str):
    """(the ASGI app, its guard): one handler under a protected and a plain route."""
    from fastapi import FastAPI, Request

    from reviewer_gate.resource import (
        ResourceGuard,
        ResourceKey,
        ReviewerGateMiddleware,
        Route,
        api_key_caller,
        authorization_detail,
    )

    app = FastAPI()

    async def refund(order_id: str, request: Request) -> dict:
        body = await request.json()
        return {"refunded": body["amount"], "order_id": order_id}

    app.post("/refunds/{order_id}")(refund)
    app.post("/plain/refunds/{order_id}")(refund)

    def describe(request):
        body = request.json_object()
        return authorization_detail(
            "refund",
            target=f"{audience}/orders/{request.path_params['order_id']}",
            amount=body["amount"],
            currency=body["currency"],
            order_id=request.path_params["order_id"],
        )

    guard = ResourceGuard(
        routes=[Route("POST", "/refunds/{order_id}", describe, tool="payments.refund")],
        audience=audience,
        reviewer_url=reviewer_url,
        api_token=API_TOKEN,
        key=ResourceKey.generate(),
        caller=api_key_caller("X-Api-Key", {CALLER_KEY: "carol"}),
        intake=True,
        issuer=issuer,
    )
    app.add_middleware(ReviewerGateMiddleware, guard=guard)
    return app, guard


def timing(samples: list[float], call):
    """`call`, appending its duration to `samples` (the bench's instrument; the guard is unchanged)."""

    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            samples.append(time.perf_counter() - started)

    return timed


def serve(app, port: int):
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise SystemExit("the refund service did not start")
        time.sleep(0.05)  # polling the server's start flag, with a deadline
    return server, thread


def main() -> list[dict]:
    environment = scratch_environment("reviewer_bench_r9")
    setup_django(environment, settings="bench.settings")
    from django.conf import settings
    from django.db import connection

    from tests import factories

    service_port = free_port()
    audience = f"http://127.0.0.1:{service_port}"
    tenant = factories.make_tenant()
    factories.make_agent(tenant, "refund-api", card_url="", audience=audience, api_token=API_TOKEN)
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund", outcome="allow")
    connection.close()

    port = int(os.environ.get("BENCH_PORT") or 0) or free_port()
    daphne = start_daphne(environment, port)
    worker = start_worker(environment, settings="bench.settings")
    app, guard = refund_service(audience, f"http://127.0.0.1:{port}", settings.REVIEWER_ISSUER)
    # The guard's requests to Reviewer: the intake (its ReviewerClient's submit, which consumes) on the
    # call's path, a consume call if it made one (it must not), the outcome after the answer was sent.
    intakes: list[float] = []
    consumes: list[float] = []
    outcomes: list[float] = []
    guard.client.submit = timing(intakes, guard.client.submit)
    guard.gate.consume = timing(consumes, guard.gate.consume)
    guard.gate.report_outcome = timing(outcomes, guard.gate.report_outcome)
    server, thread = serve(app, service_port)
    client = httpx.Client(base_url=audience, headers={"X-Api-Key": CALLER_KEY}, timeout=30)
    plain, protected, load = [], [], []
    reviewer, own = [], []  # per protected call: Reviewer's request, and the rest
    try:

        def call(path: str, samples: list[float] | None, **headers: str) -> None:
            started = time.perf_counter()
            answer = client.post(path, json=BODY, headers=headers)
            if answer.status_code != 200:
                raise SystemExit(f"{path} answered {answer.status_code}: {answer.text[:300]}")
            if samples is not None:
                samples.append(time.perf_counter() - started)

        for _ in range(5):  # warm-up: connections, the gate's JWKS
            call("/plain/refunds/1", None)
            call("/refunds/1", None, **{"Idempotency-Key": str(uuid.uuid4())})
        for _ in range(ROUNDS):
            load.append(os.getloadavg()[0])
            for number in range(CALLS):
                call(f"/plain/refunds/{number}", plain)
                before = len(intakes), len(consumes)
                call(f"/refunds/{number}", protected, **{"Idempotency-Key": str(uuid.uuid4())})
                if (len(intakes), len(consumes)) != (before[0] + 1, before[1]):
                    raise SystemExit("a protected call did not make one intake that consumed")
                reviewer.append(intakes[-1])
                own.append(protected[-1] - reviewer[-1])
    finally:
        client.close()
        server.should_exit = True
        thread.join(timeout=30)
        guard.close()
        stop_process(worker)
        daphne.terminate()
        daphne.wait(timeout=30)

    plain50, plain95 = percentile(plain, 0.5), percentile(plain, 0.95)
    protected50, protected95 = percentile(protected, 0.5), percentile(protected, 0.95)
    reviewer50, own50 = percentile(reviewer, 0.5), percentile(own, 0.5)
    outcome50 = percentile(outcomes[-len(protected) :], 0.5)
    split = (
        f"of the protected call, Reviewer's intake (which consumes) p50 {ms(reviewer50)}, the rest (the "
        f"guard's own work, the service, the client) p50 "
        f"{ms(own50)}; floor, a guard that cost nothing: (unprotected + Reviewer's request) / "
        f"unprotected = {(plain50 + reviewer50) / plain50:.2f}x; the outcome, sent after the answer "
        f"(beside the next calls), p50 {ms(outcome50)}"
    )
    return [
        {
            "id": "R9",
            "what": "a protected API's allowed call (the resource kit's 202 mode: intake with the decision "
            "in the answer, consumed there → verify → handler) vs the same call unprotected",
            "baseline": f"unprotected p50 {ms(plain50)} / p95 {ms(plain95)}",
            "measured": f"p50 {ms(protected50)} / p95 {ms(protected95)}",
            "ratio": round(protected50 / plain50, 2),
            "target": "p50 ≤ 3x",
            "note": f"{len(protected)} protected and {len(plain)} plain calls in turns, one client; "
            f"p95 ratio "
            f"{protected95 / plain95:.2f}x; load average {min(load):.1f}–{max(load):.1f}; {split}",
        },
        {
            "id": "R9k",
            "what": "the guard's own overhead: R9's protected call less its request to Reviewer (the "
            "intake), vs the same call unprotected (info)",
            "baseline": f"unprotected p50 {ms(plain50)}",
            "measured": f"p50 {ms(own50)} (Reviewer's request: p50 {ms(reviewer50)})",
            "ratio": round(own50 / plain50, 2),
            "target": "info",
        },
    ]


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=2))
