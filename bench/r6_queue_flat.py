"""R6: the queue page at 100,000 waiting proposals against the same page at 100 (p95 ≤ 1.2x, same
number of queries), and the watching list the same way (informational: R6w).

On a scratch PostgreSQL database, two tenants: in each, 100 proposals go through intake
(services.intake.submit_proposal); the large one gets 99,900 bulk-inserted copies
(tests.factories.clone_waiting). Each page is fetched by Django's test client as a signed-in,
verified reviewer, so middleware, session, queries and templates all count; the two tenants' pages
are fetched in turns, so the machine's other load falls on both alike.
"""

import time

from approvals.web.list_pages import PAGE_SIZE, QUEUE_ORDER
from bench.common import ms, percentile, scratch_environment, setup_django

SMALL, LARGE = 100, 100_000
REQUESTS = 60


def measure(pairs: list[tuple]) -> list[tuple[list[float], int]]:
    """Fetch each (client, url) REQUESTS times, taking turns, so the machine's other load falls on
    all of them alike; returns (seconds per request, queries of one request) for each."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    samples = [[] for _ in pairs]
    for _ in range(5):  # warm caches and connections
        for client, url in pairs:
            client.get(url)
    for _ in range(REQUESTS):
        for number, (client, url) in enumerate(pairs):
            started = time.perf_counter()
            response = client.get(url)
            samples[number].append(time.perf_counter() - started)
            assert response.status_code == 200, response.status_code
    counts = []
    for client, url in pairs:
        with CaptureQueriesContext(connection) as captured:
            client.get(url)
        counts.append(len(captured))
    return list(zip(samples, counts, strict=True))


def plan(sql_queryset) -> str:
    """The scans of PostgreSQL's plan for a queryset: which index serves the page."""
    from django.db import connection

    sql, params = sql_queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        lines = [row[0].strip() for row in cursor.fetchall()]
    return " / ".join(line.split("  (cost")[0] for line in lines if "Limit" in line or "Scan" in line)


def main() -> list[dict]:
    setup_django(scratch_environment("reviewer_bench_r6"))
    from django.db import connection
    from django.urls import reverse

    from approvals.web import queries
    from tests import factories

    # Two tenants side by side: one with SMALL waiting proposals, one with LARGE; a reviewer (finance)
    # and a watcher (ops: every proposal is in Watching) in each. Pages of both are fetched in turns.
    people = {}
    for size in (SMALL, LARGE):
        tenant = factories.make_tenant(slug=f"t{size}", name=f"Tenant {size}")
        factories.make_group(tenant, "ops")
        agent = factories.make_agent(tenant, slug=f"agent-{size}")
        factories.make_policy(
            tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 1}]
        )
        factories.make_user(f"requester{size}", tenant=tenant, principal_id="customer-7")
        reviewer = factories.make_user(f"reviewer{size}", tenant=tenant, groups=["finance"])
        watcher = factories.make_user(f"watcher{size}", tenant=tenant, groups=["ops"])
        proposals = [factories.submit(agent) for _ in range(SMALL)]
        factories.clone_waiting(proposals[0], size - SMALL)
        people[size] = (reviewer, watcher)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    queue_url, watch_url = reverse("approvals:queue"), reverse("approvals:watching")
    (
        (small_queue, small_queue_queries),
        (large_queue, large_queue_queries),
        (small_watch, small_watch_queries),
        (
            large_watch,
            large_watch_queries,
        ),
    ) = measure(
        [
            (factories.verified_client(people[SMALL][0]), queue_url),
            (factories.verified_client(people[LARGE][0]), queue_url),
            (factories.verified_client(people[SMALL][1]), watch_url),
            (factories.verified_client(people[LARGE][1]), watch_url),
        ]
    )

    scope = queries.ReviewerScope.of(people[LARGE][0])
    page_query = queries.with_row_data(queries.eligible_proposals(scope)).order_by(*QUEUE_ORDER)
    queue_plan = plan(page_query[: PAGE_SIZE + 1])
    rows = []
    for id_, what, small, small_queries, large, large_queries in (
        (
            "R6",
            "queue page, 100,000 waiting vs 100",
            small_queue,
            small_queue_queries,
            large_queue,
            large_queue_queries,
        ),
        (
            "R6w",
            "watching page, 100,000 vs 100 (info)",
            small_watch,
            small_watch_queries,
            large_watch,
            large_watch_queries,
        ),
    ):
        ratio = percentile(large, 0.95) / percentile(small, 0.95)
        rows.append(
            {
                "id": id_,
                "what": what,
                "baseline": f"p95 {ms(percentile(small, 0.95))}, {small_queries} q",
                "measured": f"p95 {ms(percentile(large, 0.95))}, {large_queries} q",
                "ratio": round(ratio, 2),
                "target": "p95 ≤ 1.2x, same queries",
                "met": ratio <= 1.2 and small_queries == large_queries,
                "p50": [round(percentile(small, 0.5) * 1000, 1), round(percentile(large, 0.5) * 1000, 1)],
                "note": f"p50 {ms(percentile(small, 0.5))} vs {ms(percentile(large, 0.5))}"
                + (f"; plan: {queue_plan}" if id_ == "R6" else ""),
            }
        )
    return rows


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=2))
