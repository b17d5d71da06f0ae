"""R3: intake over HTTP (POST /api/v1/proposals, 8 concurrent clients) against a bare Django endpoint
that inserts one row, served by the same Daphne process: ≥ 0.5x the bare throughput.

On a scratch PostgreSQL database, one Daphne on 127.0.0.1 with bench/settings.py (production settings
plus the bare endpoint of bench/urls.py). Each proposal goes the review path (a refund one finance
reviewer must approve): intake, policy, audit events and the review notice. One `run_worker` runs
beside it, as deployed (with AUDIT_SEQUENCING = "worker" it chains the audit events; its digests go
to the locmem mail backend). Phases alternate (bare, intake, bare, intake), each PHASE_SECONDS long,
so the machine's other load falls on both alike.
"""

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter

import httpx

from bench.common import (
    ROOT,
    ms,
    percentile,
    refund_request,
    scratch_environment,
    setup_django,
    spread,
    start_worker,
    stop_process,
)

CLIENTS = 8
PHASE_SECONDS = float(os.environ.get("BENCH_PHASE_SECONDS", "8"))
ROUNDS = 2
API_TOKEN = "bench-api-token"  # noqa: S105 (a scratch agent's token on a scratch database)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_daphne(environment: dict, port: int) -> subprocess.Popen:
    server = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "reviewer.asgi:application"],
        cwd=ROOT,
        env={**os.environ, **environment, "DJANGO_SETTINGS_MODULE": "bench.settings"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/.well-known/jwks.json", timeout=2)
            return server
        except httpx.TransportError:
            time.sleep(0.2)  # polling a server's port until it answers, with a deadline
    server.kill()
    raise SystemExit("daphne did not start")


def load(url: str, make_body, headers: dict, expect: int) -> tuple[float, list[float], Counter]:
    """CLIENTS threads post for PHASE_SECONDS; returns (requests per second, latencies, the other
    answers' status codes counted)."""
    latencies: list[float] = []
    errors: Counter = Counter()
    lock = threading.Lock()
    stop_at = time.perf_counter() + PHASE_SECONDS

    def client():
        with httpx.Client(headers=headers, timeout=30) as http:
            while time.perf_counter() < stop_at:
                started = time.perf_counter()
                response = http.post(url, json=make_body())
                took = time.perf_counter() - started
                with lock:
                    if response.status_code == expect:
                        latencies.append(took)
                    else:
                        errors[response.status_code] += 1

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(latencies) / (time.perf_counter() - started), latencies, errors


def main() -> list[dict]:
    environment = scratch_environment("reviewer_bench_r3")
    setup_django(environment, settings="bench.settings")
    from django.db import connection

    from bench.urls import BARE_TABLE
    from tests import factories

    tenant = factories.make_tenant()
    factories.make_agent(tenant, api_token=API_TOKEN)
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 1}]
    )
    for number in range(3):
        factories.make_user(f"reviewer{number}", tenant=tenant, groups=["finance"])
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {BARE_TABLE} (id bigserial PRIMARY KEY, body jsonb NOT NULL)")
    connection.close()

    def proposal_body():
        return {"task_id": f"task-{uuid.uuid4()}", "context_id": "ctx-bench", "request": refund_request()}

    port = int(os.environ.get("BENCH_PORT") or 0) or free_port()  # BENCH_PORT: a port of your range
    server = start_daphne(environment, port)
    worker = start_worker(environment, settings="bench.settings")  # as deployed: it chains the audit trail
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    bare, intake = [], []
    try:
        load(f"{base}/api/bench/bare-insert", proposal_body, {}, 201)  # warm-up
        for _ in range(ROUNDS):
            bare.append(load(f"{base}/api/bench/bare-insert", proposal_body, {}, 201))
            intake.append(load(f"{base}/api/v1/proposals", proposal_body, headers, 201))
    finally:
        stop_process(worker)
        server.terminate()
        server.wait(timeout=30)

    def summary(phases):
        rate = sum(phase[0] for phase in phases) / len(phases)
        latencies = [value for phase in phases for value in phase[1]]
        return rate, latencies, sum((phase[2] for phase in phases), Counter())

    bare_rate, bare_latencies, bare_errors = summary(bare)
    intake_rate, intake_latencies, intake_errors = summary(intake)
    return [
        {
            "id": "R3",
            "what": f"intake over HTTP, {CLIENTS} clients, one Daphne",
            "baseline": f"{bare_rate:.0f} req/s (bare insert)",
            "measured": f"{intake_rate:.0f} req/s",
            "ratio": round(intake_rate / bare_rate, 2),
            "target": "≥ 0.5x",
            "note": f"p50 {ms(percentile(intake_latencies, 0.5))}"
            f" vs bare {ms(percentile(bare_latencies, 0.5))}"
            f", p95 {ms(percentile(intake_latencies, 0.95))} vs {ms(percentile(bare_latencies, 0.95))}"
            f"; errors {_counted(intake_errors)} vs {_counted(bare_errors)}"
            f"; {spread([i[0] / b[0] for b, i in zip(bare, intake, strict=True)])}",
        }
    ]


def _counted(errors: Counter) -> str:
    """ "0", or the total with each status code's count: "116 (503: 116)"."""
    if not errors:
        return "0"
    codes = ", ".join(f"{code}: {count}" for code, count in sorted(errors.items()))
    return f"{errors.total()} ({codes})"


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=2))
