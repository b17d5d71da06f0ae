"""R1r and R7: a REST pull agent's policy-allowed call, against a bare authenticated API round trip to
the same Daphne.

- **R1r** (latency, one agent): submit (`POST /api/v1/proposals`; policy allows, so the signed decision
  is in the intake answer) → verify (reviewer-gate's `Gate`: signature, binding, single use) → consume
  (`POST /api/v1/decisions/<jti>/consume`). Baseline: `GET /api/v1/proposals/<id>` with the same agent
  token (authentication, one read, JSON). Target p50 ≤ 3x.
- **R7** (capacity): allowed calls per second with 8 concurrent agents (threads, kept-alive
  connections) against bare requests per second at 8. Target ≥ 0.33x: one allowed call should cost
  Reviewer no more than about three bare requests.

On a scratch PostgreSQL database, one Daphne (bench/settings.py), one pull agent (registered without
a card URL: no continuation, no outbox row), one allow policy, REVIEWERS (5) reviewers in the tenant
(none with a page open, as for most allowed calls), and one `run_worker` beside it, as
deployed (AUDIT_SEQUENCING = "worker", the default on PostgreSQL: it chains the audit events the
Daphne accepts; "after_commit": the Daphne chains them itself after each commit).
R1r alternates one bare request and one call; R7's phases alternate (bare, allowed; ROUNDS times), so
the machine's other load falls on both alike. COMMIT_HOOKS_IN_BACKGROUND in the environment reaches
the Daphne (false: the after-commit work runs before the answer, as before it had a thread).
"""

import os
import threading
import time
import uuid

import httpx

from bench.common import (
    ms,
    percentile,
    refund_request,
    scratch_environment,
    setup_django,
    start_worker,
    stop_process,
)
from bench.r3_intake_http import free_port, start_daphne

CLIENTS = 8
CALLS = int(os.environ.get("BENCH_R1R_CALLS", "40"))  # per round, one agent
PHASE_SECONDS = float(os.environ.get("BENCH_PHASE_SECONDS", "8"))
ROUNDS = 2
API_TOKEN = "bench-api-token"  # noqa: S105 (a scratch agent's token on a scratch database)
REVIEWERS = int(os.environ.get("BENCH_R7_REVIEWERS", "5"))  # a tenant of agents has people too


class Agent:
    """One pull agent: its kept-alive connection and the gate it verifies with."""

    def __init__(self, base: str, gate):
        self.http = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=30)
        self.gate = gate

    def bare(self, proposal_id: str) -> bool:
        return self.http.get(f"/api/v1/proposals/{proposal_id}").status_code == 200

    def allowed_call(self) -> bool:
        request = refund_request()
        task_id = f"task-{uuid.uuid4()}"
        answer = self.http.post("/api/v1/proposals", json={"task_id": task_id, "request": request})
        if answer.status_code != 201 or not answer.json().get("token"):
            return False
        decision = self.gate.verify(
            answer.json()["token"],
            task_id=task_id,
            request_id=request["request_id"],
            action_digest=request["action_digest"],
        )
        consumed = self.http.post(f"/api/v1/decisions/{decision.jti}/consume", json={"rev": decision.rev})
        return consumed.status_code == 200


def interleaved(agent: Agent, proposal_id: str) -> tuple[list[float], list[float]]:
    """One bare request, then one allowed call, CALLS times: a swing of the machine's load falls on
    both sides of the ratio."""
    bare, calls = [], []
    for _ in range(CALLS):
        for call, samples in ((lambda: agent.bare(proposal_id), bare), (agent.allowed_call, calls)):
            started = time.perf_counter()
            if not call():
                raise SystemExit("a call failed")
            samples.append(time.perf_counter() - started)
    return bare, calls


def concurrent(agents: list[Agent], name: str, proposal_id: str) -> tuple[float, int]:
    """CLIENTS agents call for PHASE_SECONDS; (successful calls per second, failures)."""
    done, failed = [0], [0]
    lock = threading.Lock()
    stop_at = time.perf_counter() + PHASE_SECONDS

    def client(agent: Agent):
        call = agent.allowed_call if name == "allowed" else lambda: agent.bare(proposal_id)
        while time.perf_counter() < stop_at:
            ok = call()
            with lock:
                (done if ok else failed)[0] += 1

    threads = [threading.Thread(target=client, args=(agent,)) for agent in agents]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return done[0] / (time.perf_counter() - started), failed[0]


def main() -> list[dict]:
    environment = scratch_environment("reviewer_bench_r7")
    setup_django(environment, settings="bench.settings")
    from django.conf import settings
    from django.db import connection

    from reviewer_gate.gate import Gate, MemoryUsedStore, StaticKeySource
    from tests import factories

    tenant = factories.make_tenant()
    agent_row = factories.make_agent(tenant, api_token=API_TOKEN, card_url="")
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund", outcome="allow")
    for number in range(REVIEWERS):
        factories.make_user(f"reviewer-{number}", tenant=tenant)
    connection.close()

    port = int(os.environ.get("BENCH_PORT") or 0) or free_port()
    server = start_daphne(environment, port)
    worker = start_worker(environment, settings="bench.settings")  # as deployed: it chains the audit trail
    base = f"http://127.0.0.1:{port}"
    try:
        jwks = httpx.get(f"{base}/.well-known/jwks.json").json()
        gate = Gate(
            issuer=settings.REVIEWER_ISSUER,
            audience=agent_row.audience,
            keys=StaticKeySource(jwks),
            used_store=MemoryUsedStore(),
            tenant=tenant.slug,
        )
        agents = [Agent(base, gate) for _ in range(CLIENTS)]
        one = agents[0]
        first = one.http.post(
            "/api/v1/proposals", json={"task_id": "task-bare", "request": factories.approval_request()}
        )
        proposal_id = first.json()["proposal_id"]
        interleaved(one, proposal_id)  # warm-up
        bare_lat, call_lat, bare_rates, call_rates, failures, load = [], [], [], [], [0, 0], []
        for _ in range(ROUNDS):
            load.append(os.getloadavg()[0])
            bare, calls = interleaved(one, proposal_id)
            bare_lat += bare
            call_lat += calls
            rate, failed = concurrent(agents, "bare", proposal_id)
            bare_rates.append(rate)
            failures[0] += failed
            rate, failed = concurrent(agents, "allowed", proposal_id)
            call_rates.append(rate)
            failures[1] += failed
    finally:
        stop_process(worker)
        server.terminate()
        server.wait(timeout=30)

    bare50, bare95 = percentile(bare_lat, 0.5), percentile(bare_lat, 0.95)
    call50, call95 = percentile(call_lat, 0.5), percentile(call_lat, 0.95)
    bare_rate, call_rate = sum(bare_rates) / ROUNDS, sum(call_rates) / ROUNDS
    loads = f"load average {min(load):.1f}–{max(load):.1f}"
    return [
        {
            "id": "R1r",
            "what": "REST allowed call (submit with the decision in the answer → verify → consume)",
            "baseline": f"bare GET p50 {ms(bare50)} / p95 {ms(bare95)}",
            "measured": f"p50 {ms(call50)} / p95 {ms(call95)}",
            "ratio": round(call50 / bare50, 2),
            "target": "p50 ≤ 3x",
            "note": f"{len(call_lat)} calls, {len(bare_lat)} bare requests, one agent; p95 ratio "
            f"{call95 / bare95:.2f}x; {loads}",
        },
        {
            "id": "R7",
            "what": f"REST allowed calls per second, {CLIENTS} concurrent agents, one Daphne",
            "baseline": f"{bare_rate:.0f} bare req/s",
            "measured": f"{call_rate:.1f} calls/s",
            "ratio": round(call_rate / bare_rate, 2),
            "target": "≥ 0.33x",
            "note": f"failures: {failures[1]} calls, {failures[0]} bare; {loads}",
        },
    ]


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=2))
