"""R11: what traces cost the hot path. R1r's call (a REST pull agent's policy-allowed call: submit with
the decision in the answer → verify → consume) to a Daphne exporting traces over OTLP/HTTP to a
collector on loopback, against the same call to a Daphne with traces off (the default).

Both Daphnes serve one scratch PostgreSQL database beside one worker; the agent sends a W3C
`traceparent` with every call (as reviewer-gate does inside an agent's span), so the traced Daphne makes
every span of the call under it, and alternates one call to each, CALLS times per round, ROUNDS rounds,
so the machine's other load falls on both sides. The collector (a stand-in for the OpenTelemetry
Collector: it accepts each OTLP/HTTP export and drops it) runs in this process; the export itself runs
on the SDK's batch processor thread in the Daphne, as deployed. Target p50 ≤ 1.1x.

bench/trace_cost.py gives the same cost per span, in one process.
"""

import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from bench.common import ms, percentile, scratch_environment, setup_django, start_worker, stop_process
from bench.r3_intake_http import free_port, start_daphne
from bench.r7_rest_allowed import API_TOKEN, Agent

CALLS = int(os.environ.get("BENCH_R11_CALLS", "40"))  # per round, to each Daphne
ROUNDS = 3
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class DroppingCollector:
    """An OTLP/HTTP receiver on loopback that answers 200 to every export and counts them."""

    def __init__(self):
        self.exports = 0
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                collector.exports += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def main() -> list[dict]:
    environment = scratch_environment("reviewer_bench_r11")
    setup_django(environment, settings="bench.settings")
    from django.conf import settings
    from django.db import connection

    from reviewer_gate.gate import Gate, MemoryUsedStore, StaticKeySource
    from tests import factories

    tenant = factories.make_tenant()
    agent_row = factories.make_agent(tenant, api_token=API_TOKEN, card_url="")
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund", outcome="allow")
    connection.close()

    collector = DroppingCollector()
    traced_environment = {
        **environment,
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_SERVICE_NAME": "reviewer-bench",
    }
    port_off, port_on = free_port(), free_port()
    untraced = start_daphne(environment, port_off)
    traced = start_daphne(traced_environment, port_on)
    worker = start_worker(environment, settings="bench.settings")
    try:
        jwks = httpx.get(f"http://127.0.0.1:{port_off}/.well-known/jwks.json").json()
        gate = Gate(
            issuer=settings.REVIEWER_ISSUER,
            audience=agent_row.audience,
            keys=StaticKeySource(jwks),
            used_store=MemoryUsedStore(),
            tenant=tenant.slug,
        )
        agents = {}
        for name, port in (("off", port_off), ("on", port_on)):
            agents[name] = Agent(f"http://127.0.0.1:{port}", gate)
            agents[name].http.headers["traceparent"] = TRACEPARENT
        samples: dict[str, list[float]] = {"off": [], "on": []}
        load = []
        for round_number in range(ROUNDS + 1):  # the first round warms both up and is not counted
            load.append(os.getloadavg()[0])
            for _ in range(CALLS):
                for name in ("off", "on") if round_number % 2 else ("on", "off"):
                    started = time.perf_counter()
                    if not agents[name].allowed_call():
                        raise SystemExit(f"a call failed (traces {name})")
                    if round_number:
                        samples[name].append(time.perf_counter() - started)
        exports = collector.exports
    finally:
        stop_process(worker)
        for server in (untraced, traced):
            server.terminate()
            server.wait(timeout=30)
        collector.stop()

    off50, on50 = percentile(samples["off"], 0.5), percentile(samples["on"], 0.5)
    off95, on95 = percentile(samples["off"], 0.95), percentile(samples["on"], 0.95)
    if not exports:
        raise SystemExit("the traced Daphne exported nothing: traces were not on")
    return [
        {
            "id": "R11",
            "what": "REST allowed call with traces on (OTLP/HTTP to a loopback collector) vs traces off",
            "baseline": f"traces off p50 {ms(off50)} / p95 {ms(off95)}",
            "measured": f"traces on p50 {ms(on50)} / p95 {ms(on95)}",
            "ratio": round(on50 / off50, 2),
            "target": "p50 ≤ 1.1x",
            "note": f"{len(samples['on'])} calls each, in turns, two Daphnes on one database; p95 ratio "
            f"{on95 / off95:.2f}x; {exports} OTLP exports received; load average "
            f"{min(load):.1f}–{max(load):.1f}",
        }
    ]


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=2))
