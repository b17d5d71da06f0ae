"""R10: a REST pull agent's call allowed under a standing grant, against a policy-allowed call, to the
same Daphne.

Both are submit (`POST /api/v1/proposals`, the signed decision in the intake answer) → verify
(reviewer-gate's `Gate`) → consume. The policy-allowed call is a refund an `allow` policy matches; the
call under the grant is a credit a `require_approval` policy sends to people, which an active grant
("credits of at most EUR 50", two approvals) decides instead: intake also locks the agent's grants,
checks the grant's condition and budget, spends it and records the use (both held with the
proposal's insert). Target: p50 ≤ 1.2x. One agent, the two calls interleaved one for one, so the
machine's other load falls on both; a `run_worker` beside the Daphne chains the audit trail, as
deployed (see r7_rest_allowed.py).
"""

import os
import time
import uuid
from datetime import UTC, datetime, timedelta

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
from bench.r7_rest_allowed import API_TOKEN, Agent

CALLS = int(os.environ.get("BENCH_R10_CALLS", "60"))  # per round
ROUNDS = 2


def credit_request() -> dict:
    from tests import factories

    request = refund_request()
    action = {**request["action"], "tool": "payments.credit"}
    return factories.approval_request(action=action)


def call(agent: Agent, request: dict) -> bool:
    task_id = f"task-{uuid.uuid4()}"
    answer = agent.http.post("/api/v1/proposals", json={"task_id": task_id, "request": request})
    if answer.status_code != 201 or not answer.json().get("token"):
        return False
    decision = agent.gate.verify(
        answer.json()["token"],
        task_id=task_id,
        request_id=request["request_id"],
        action_digest=request["action_digest"],
    )
    return (
        agent.http.post(f"/api/v1/decisions/{decision.jti}/consume", json={"rev": decision.rev}).status_code
        == 200
    )


def interleaved(agent: Agent) -> tuple[list[float], list[float]]:
    policy, grant = [], []
    for _ in range(CALLS):
        for make, samples in ((refund_request, policy), (credit_request, grant)):
            request = make()
            started = time.perf_counter()
            if not call(agent, request):
                raise SystemExit(f"a call failed ({request['action']['tool']})")
            samples.append(time.perf_counter() - started)
    return policy, grant


def main() -> list[dict]:
    environment = scratch_environment("reviewer_bench_r9")
    setup_django(environment, settings="bench.settings")
    from django.conf import settings
    from django.db import connection

    from approvals.models import Grant
    from reviewer_gate.gate import Gate, MemoryUsedStore, StaticKeySource
    from tests import factories

    tenant = factories.make_tenant()
    agent_row = factories.make_agent(tenant, api_token=API_TOKEN, card_url="")
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund", outcome="allow", thresholds=[])
    factories.make_policy(
        tenant, "credits", tool_pattern="payments.credit", thresholds=[{"group": "finance", "count": 1}]
    )
    factories.make_policy(
        tenant, "grants", tool_pattern="reviewer.grant", thresholds=[{"group": "finance", "count": 2}]
    )
    first, second = (
        factories.make_user(f"reviewer-{n}", tenant=tenant, groups=["finance"]) for n in range(2)
    )
    expires = (datetime.now(UTC) + timedelta(days=7)).isoformat().replace("+00:00", "Z")
    terms = {
        "tool_pattern": "payments.credit",
        "condition": "double(args.amount) <= 50.0",
        "expires_at": expires,
        "max_uses": "10000",
        "max_amount": {"EUR": "1000000.00"},
    }
    asked = factories.submit(agent_row, action={"tool": "reviewer.grant", "arguments": terms})
    factories.vote(asked, first)
    factories.vote(asked, second)
    assert Grant.objects.get(proposal=asked).state == Grant.State.ACTIVE
    connection.close()

    port = int(os.environ.get("BENCH_PORT") or 0) or free_port()
    server = start_daphne(environment, port)
    worker = start_worker(environment, settings="bench.settings")
    base = f"http://127.0.0.1:{port}"
    try:
        import httpx

        gate = Gate(
            issuer=settings.REVIEWER_ISSUER,
            audience=agent_row.audience,
            keys=StaticKeySource(httpx.get(f"{base}/.well-known/jwks.json").json()),
            used_store=MemoryUsedStore(),
            tenant=tenant.slug,
        )
        agent = Agent(base, gate)
        interleaved(agent)  # warm-up
        policy_lat, grant_lat, load = [], [], []
        for _ in range(ROUNDS):
            load.append(os.getloadavg()[0])
            policy, grant = interleaved(agent)
            policy_lat += policy
            grant_lat += grant
    finally:
        stop_process(worker)
        server.terminate()
        server.wait(timeout=30)

    policy50, grant50 = percentile(policy_lat, 0.5), percentile(grant_lat, 0.5)
    policy95, grant95 = percentile(policy_lat, 0.95), percentile(grant_lat, 0.95)
    return [
        {
            "id": "R10",
            "what": "REST call allowed under a standing grant (submit → verify → consume)",
            "baseline": f"policy-allowed p50 {ms(policy50)} / p95 {ms(policy95)}",
            "measured": f"p50 {ms(grant50)} / p95 {ms(grant95)}",
            "ratio": round(grant50 / policy50, 2),
            "target": "p50 ≤ 1.2x",
            "note": f"{len(grant_lat)} calls of each, one agent, interleaved; "
            f"p95 ratio {grant95 / policy95:.2f}x; load average {min(load):.1f}–{max(load):.1f}",
        }
    ]


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=2))
