"""In-process CPU of one REST policy-allowed call (submit with the decision in the answer → verify →
consume) against a bare authenticated GET, through Django's test client on a scratch PostgreSQL
database (bench/README.md, "Performance: results and profiles"). Not a module of bench/run.py: it
prints, it returns no rows.

    BENCH_DB_PREFIX=me_ CLOCK=thread|process N=40 [MEMBERS=5] [PROFILE=40 [PROFILE_OUT=file]] \
        .venv/bin/python bench/profile_allowed_call.py

MEMBERS: that many reviewers in the agent's tenant (none by default), none of them with a page open.

CLOCK=thread times the request's thread only; process (the default) the whole process, with the
after-commit thread's audit sequencing and broadcasts: each request's clock is read once that thread
has run what the request handed it, so its work counts in the request that caused it (not in the next
one). COMMIT_HOOKS_IN_BACKGROUND=false runs those hooks in the request's thread instead, where
PROFILE sees them.
"""

import cProfile
import os
import pstats
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import scratch_environment, setup_django  # noqa: E402 (after the path)

CLOCK = time.thread_time if os.environ.get("CLOCK") == "thread" else time.process_time


def main() -> None:
    environment = scratch_environment(os.environ.get("BENCH_DB_PREFIX", "") + "reviewer_bench_profile")
    setup_django(environment, settings="bench.settings")
    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from lib.commit_hooks import wait_for_background_hooks
    from reviewer_gate.gate import Gate, MemoryUsedStore, StaticKeySource
    from tests import factories

    tenant = factories.make_tenant()
    agent = factories.make_agent(tenant, api_token="bench-token", card_url="")  # noqa: S106 (scratch)
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund", outcome="allow")
    for number in range(int(os.environ.get("MEMBERS", "0"))):  # reviewers of the tenant, as deployed
        factories.make_user(f"reviewer-{number}", tenant=tenant)
    client = Client(HTTP_AUTHORIZATION="Bearer bench-token")
    gate = Gate(
        issuer=settings.REVIEWER_ISSUER,
        audience=agent.audience,
        keys=StaticKeySource(client.get("/.well-known/jwks.json").json()),
        used_store=MemoryUsedStore(),
        tenant=tenant.slug,
    )
    first = client.post(
        "/api/v1/proposals",
        {"task_id": "task-bare", "request": factories.approval_request()},
        content_type="application/json",
    )
    bare_url = f"/api/v1/proposals/{first.json()['proposal_id']}"

    def submit() -> tuple:
        request, task_id = factories.approval_request(), f"task-{uuid.uuid4()}"
        body = {"task_id": task_id, "request": request}
        answer = client.post("/api/v1/proposals", body, content_type="application/json")
        assert answer.status_code == 201, answer.content
        return answer, request, task_id

    def verify(answer, request, task_id):
        return gate.verify(
            answer.json()["token"],
            task_id=task_id,
            request_id=request["request_id"],
            action_digest=request["action_digest"],
        )

    def consume(decision) -> None:
        url = f"/api/v1/decisions/{decision.jti}/consume"
        consumed = client.post(url, {"rev": decision.rev}, content_type="application/json")
        assert consumed.status_code == 200, consumed.content

    def settled() -> float:
        """The clock, once the after-commit thread has run what was handed to it (CLOCK=process)."""
        if CLOCK is time.process_time:
            wait_for_background_hooks()
        return CLOCK()

    def one_call(parts: dict) -> None:
        started = settled()
        answer, request, task_id = submit()
        submitted = settled()
        decision = verify(answer, request, task_id)
        verified = settled()
        consume(decision)
        parts["intake"].append(submitted - started)
        parts["verify"].append(verified - submitted)
        parts["consume"].append(settled() - verified)
        started = settled()
        assert client.get(bare_url).status_code == 200
        parts["bare"].append(settled() - started)

    names = ("intake", "verify", "consume", "bare")
    for _ in range(10):  # warm-up
        one_call({name: [] for name in names})
    parts: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(int(os.environ.get("N", "40"))):
        one_call(parts)
    medians = {name: round(statistics.median(values) * 1000, 2) for name, values in parts.items()}
    call = medians["intake"] + medians["verify"] + medians["consume"]
    print(
        f"median CPU ms ({CLOCK.__name__}): {medians}; the call in bare requests: "
        f"{call / medians['bare']:.2f}"
    )

    with CaptureQueriesContext(connection) as intake_queries:
        answer, request, task_id = submit()
    decision = verify(answer, request, task_id)
    with CaptureQueriesContext(connection) as consume_queries:
        consume(decision)
    with CaptureQueriesContext(connection) as bare_queries:
        client.get(bare_url)
    print(
        f"statements: intake {len(intake_queries)}, consume {len(consume_queries)}, bare {len(bare_queries)}"
    )

    if os.environ.get("PROFILE"):
        profile = cProfile.Profile(CLOCK)
        profile.enable()
        for _ in range(40):
            one_call({name: [] for name in names})
        profile.disable()
        if os.environ.get("PROFILE_OUT"):  # for pstats' other views (callers, tottime)
            profile.dump_stats(os.environ["PROFILE_OUT"])
        pstats.Stats(profile).sort_stats("cumulative").print_stats(int(os.environ["PROFILE"]))
    print("load average", os.getloadavg())


if __name__ == "__main__":
    main()
