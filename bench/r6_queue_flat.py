"""R6: the queue page at 1,000,000 waiting proposals against the same page at 100 (p95 ≤ 1.2x, same
number of queries), and the watching list the same way (informational: R6w). R6t: the worker's tick
with nothing due (every request announced, looked at and chased up to its next time) before and after
the million (p50 ≤ 1.2x, same queries): a tick reads what is due, not what waits. Its two sides are
worker processes of their own (`TickProcess`), one on this database and one on a database with only the
200, ticked in turns.

On a scratch PostgreSQL database, two tenants: in each, 100 proposals go through intake
(services.intake.submit_proposal); the large one gets 999,900 copies of one of them made by the
server itself (`clone_waiting_sql`: one INSERT … SELECT over generate_series, with their policy pins;
every column the lists read and every index of the table, but no audit events: a scratch database's
volume, not a history). BENCH_R6_LARGE sets another size. Each page is fetched by Django's test
client as a signed-in, verified reviewer, so middleware, session, queries and templates all count;
the two tenants' pages are fetched in turns, so the machine's other load falls on both alike. With
BENCH_R6_EXPLAIN=1 it prints EXPLAIN ANALYZE of every query of the large tenant's two pages.
"""

import os
import time

from bench.common import ms, part_ratios, percentile, scratch_environment, setup_django, spread

SMALL = 100
LARGE = int(os.environ.get("BENCH_R6_LARGE", "1000000"))
REQUESTS = 60


def clone_waiting_sql(template, count: int) -> None:
    """`count` copies of a waiting proposal, made by PostgreSQL in one statement (no rows through
    Python): each its own id, request and target (an order number of its own), expiring one second
    apart after the template and one millisecond older each, as tests.factories.clone_waiting makes
    them; then the copies' policy pins (no audit events, and their foreign keys not checked row by row:
    they are the template's), and their follow-ups as the worker leaves them once it looked at each
    (announced, reachable, next look at the expiry). The table's non-unique indexes are dropped for the
    insert and made again after it (the same definitions, as pg_indexes gives them: about half the time
    of keeping them up row by row), then the tables are vacuumed and analyzed."""
    from django.db import connection

    from approvals.models import Proposal
    from approvals.models.notifications import FollowUp

    table = Proposal._meta.db_table
    pins = Proposal.policy_versions.through._meta.db_table
    follow_ups = FollowUp._meta.db_table
    copied = [f.column for f in Proposal._meta.concrete_fields]
    made = {
        "id": "gen_random_uuid()",
        "request_id": "'clone-' || n",
        "task_id": "'clone-task-' || n",
        "target_key": "p.tool || '|order:clone-' || n",
        "expires_at": "p.expires_at + n * interval '1 second'",
        "created_at": "p.created_at - n * interval '1 millisecond'",
    }
    columns = ", ".join(f'"{c}"' for c in copied)
    values = ", ".join(made.get(c, f'p."{c}"') for c in copied)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index i "
            "WHERE i.indrelid = %s::regclass AND NOT i.indisunique",
            [table],
        )
        indexes = cursor.fetchall()
        # Statement by statement (autocommit). The copies' foreign keys are the template's own, so their
        # row-by-row checks (triggers) are skipped for the two inserts (replica role: superuser, as the
        # scratch server's postgres is).
        cursor.execute("SET session_replication_role = replica")
        for name, _definition in indexes:
            cursor.execute(f"DROP INDEX {name}")
        cursor.execute(
            f'INSERT INTO "{table}" ({columns}) SELECT {values} '  # noqa: S608 (the model's own names)
            f'FROM "{table}" p, generate_series(1, %s) AS n WHERE p.id = %s',
            [count, template.pk],
        )
        cursor.execute(
            f'INSERT INTO "{pins}" (proposal_id, policyversion_id) '  # noqa: S608
            f'SELECT c.id, t.policyversion_id FROM "{table}" c JOIN "{pins}" t ON t.proposal_id = %s '
            f"WHERE c.agent_id = %s AND c.request_id LIKE 'clone-%%'",
            [template.pk, template.agent_id],
        )
        cursor.execute(
            f'INSERT INTO "{follow_ups}" (proposal_id, due_at, announced_at, reminders_sent, '  # noqa: S608
            "reach_checked_at, unreachable, done) "
            f"SELECT c.id, c.expires_at, now(), '[]', now(), '{{}}', false FROM \"{table}\" c "
            f"WHERE c.agent_id = %s AND c.request_id LIKE 'clone-%%'",
            [template.agent_id],
        )
        cursor.execute("SET session_replication_role = DEFAULT")
        for _name, definition in indexes:
            cursor.execute(definition)
        for name in (table, pins, follow_ups):
            cursor.execute(f'VACUUM ANALYZE "{name}"')


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


TICKS = 20
REPLY = "R6T "  # the tick processes' answer lines start with this (anything else on stdout is not one)


def serve_ticks() -> None:
    """A tick process (bench R6t): Django on the database of its environment; with R6T_BUILD set it
    first makes the two tenants' 2 × SMALL waiting proposals (the small side). Unmeasured ticks catch
    up on what intake left (announcing, 50 a tick; first looks; digests); then, for each line on stdin,
    "tick" answers the seconds of one worker tick (run_worker's full tick) and "count" the queries of one."""
    import sys

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    setup_django({})
    if os.environ.get("R6T_BUILD"):
        make_tenants()
    from approvals.services.follow_ups import unannounced_follow_ups
    from approvals.worker.loop import Worker

    worker = Worker()
    worker.tick()
    while unannounced_follow_ups(1):  # the announcing step takes 50 new requests a tick
        worker.tick()
    print(f"{REPLY}ready", flush=True)
    for command in sys.stdin:
        if command.strip() == "count":
            with CaptureQueriesContext(connection) as captured:
                worker.tick()
            print(f"{REPLY}{len(captured)}", flush=True)
            continue
        started = time.perf_counter()
        worker.tick()
        print(f"{REPLY}{time.perf_counter() - started}", flush=True)


class TickProcess:
    """A worker of its own database in a process of its own (serve_ticks), ticked on command: the two
    sides of R6t, 200 waiting and a million, are ticked in turns, so the machine's other load falls on
    both alike (measured one after the other, the ratio ranged 0.78x to 1.34x over four runs)."""

    def __init__(self, environment: dict, *, build: bool):
        import subprocess
        import sys

        from bench.common import ROOT

        self.process = subprocess.Popen(
            [sys.executable, "-c", "from bench.r6_queue_flat import serve_ticks; serve_ticks()"],
            cwd=ROOT,
            env={**os.environ, **environment, "R6T_BUILD": "1" if build else ""},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.answer()  # ready

    def answer(self) -> str:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(REPLY):
                return line[len(REPLY) :].strip()
        raise SystemExit(f"a tick process ended (exit {self.process.wait()})")

    def ask(self, command: str) -> str:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.answer()

    def stop(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(timeout=60)


def ticks_in_turns(small: TickProcess, large: TickProcess) -> tuple[tuple[list[float], int], ...]:
    """TICKS ticks of each side, in turns (which goes first alternates), and the queries of one."""
    samples: dict[TickProcess, list[float]] = {small: [], large: []}
    for turn in range(TICKS):
        for side in (small, large) if turn % 2 == 0 else (large, small):
            samples[side].append(float(side.ask("tick")))
    return tuple((samples[side], int(side.ask("count"))) for side in (small, large))


def make_tenants() -> dict:
    """Two tenants side by side, one to stay at SMALL waiting proposals and one to grow to LARGE; in
    each SMALL go through intake, with a reviewer (finance) and a watcher (ops: every proposal is in
    Watching). Returns size -> (reviewer, watcher, a waiting proposal)."""
    from tests import factories

    made = {}
    for size in (SMALL, LARGE):
        tenant = factories.make_tenant(slug=f"t{size}", name=f"Tenant {size}")
        factories.make_group(tenant, "ops")
        # Pull agents: the worker's tick asks no card URL (an A2A agent's tasks would be asked by HTTP).
        agent = factories.make_agent(tenant, slug=f"agent-{size}", card_url="")
        factories.make_policy(
            tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 1}]
        )
        factories.make_user(f"requester{size}", tenant=tenant, principal_id="customer-7")
        reviewer = factories.make_user(f"reviewer{size}", tenant=tenant, groups=["finance"])
        watcher = factories.make_user(f"watcher{size}", tenant=tenant, groups=["ops"])
        proposals = [factories.submit(agent) for _ in range(SMALL)]
        made[size] = (reviewer, watcher, proposals[0])
    return made


def plan(sql_queryset) -> str:
    """The scans of PostgreSQL's plan for a queryset: which index serves the page."""
    from django.db import connection

    sql, params = sql_queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        lines = [row[0].strip() for row in cursor.fetchall()]
    return " / ".join(line.split("  (cost")[0] for line in lines if "Limit" in line or "Scan" in line)


def executed(sql_queryset) -> float:
    """PostgreSQL's execution time of a queryset, in ms (EXPLAIN ANALYZE, one run)."""
    from django.db import connection

    sql, params = sql_queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE) " + sql, params)
        last = [row[0] for row in cursor.fetchall()][-1]
    return float(last.split(":")[1].split()[0])


def explain_page(client, url: str) -> None:
    """EXPLAIN ANALYZE of every query one fetch of the page makes, slowest first (BENCH_R6_EXPLAIN)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        client.get(url)
    timed = []
    with connection.cursor() as cursor:
        for query in captured.captured_queries:
            if not query["sql"].lstrip().upper().startswith("SELECT"):
                continue
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + query["sql"])
            lines = [row[0] for row in cursor.fetchall()]
            took = float(lines[-1].split(":")[1].split()[0])  # "Execution Time: 0.123 ms"
            timed.append((took, query["sql"], lines))
    print(f"== {url}: {len(captured)} queries", flush=True)
    for took, sql, lines in sorted(timed, reverse=True):
        print(f"-- {took:.3f} ms: {sql[:300]}\n" + "\n".join(lines), flush=True)


def main() -> list[dict]:
    # One agent stands for many here: its intake quotas (60 open proposals) out of the way of the 100.
    quotas = ("AGENT_INTAKE_BURST", "AGENT_INTAKE_PER_MINUTE", "AGENT_OPEN_PROPOSALS")
    quotas += ("TENANT_INTAKE_BURST", "TENANT_INTAKE_PER_MINUTE", "TENANT_OPEN_PROPOSALS")
    unlimited = {name: "1000000000" for name in quotas}
    environment = {**scratch_environment("reviewer_bench_r6"), **unlimited}
    small_environment = {**scratch_environment("reviewer_bench_r6_small"), **unlimited}
    setup_django(environment)
    from django.db import connection
    from django.urls import reverse

    from approvals.web import queries
    from approvals.web.list_pages import (
        PAGE_SIZE,
        QUEUE_ORDER,
        WATCHING_ORDER,
    )  # after Django's setup: it reads models
    from tests import factories

    people = make_tenants()
    template = people[LARGE][2]
    started = time.perf_counter()
    clone_waiting_sql(template, LARGE - SMALL)
    built = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    # R6t: a tick process on this database (a million waiting) and one on a database of its own with the
    # two tenants at SMALL each (200 waiting), ticked in turns.
    large_ticks = TickProcess(environment, build=False)
    small_ticks = TickProcess(small_environment, build=True)
    try:
        ticks_before, ticks_after = ticks_in_turns(small_ticks, large_ticks)
    finally:
        small_ticks.stop()
        large_ticks.stop()
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
            (reviewer_client := factories.verified_client(people[LARGE][0]), queue_url),
            (factories.verified_client(people[SMALL][1]), watch_url),
            (watcher_client := factories.verified_client(people[LARGE][1]), watch_url),
        ]
    )

    if os.environ.get("BENCH_R6_EXPLAIN"):
        for client, url in ((reviewer_client, queue_url), (watcher_client, watch_url)):
            explain_page(client, url)
    scope = queries.ReviewerScope.of(people[LARGE][0])
    page_query = queries.with_row_data(queries.eligible_proposals(scope)).order_by(*QUEUE_ORDER)
    queue_plan = plan(page_query[: PAGE_SIZE + 1])
    # The other side of each list: the queue of a person who can decide none of the large tenant's
    # proposals (the watcher) and the watching list of one who can decide all of them (the reviewer).
    # Both lists are empty; the page queries' execution time (EXPLAIN ANALYZE, one run each).
    watcher_scope = queries.ReviewerScope.of(people[LARGE][1])
    empty_queue = executed(
        queries.with_row_data(queries.eligible_proposals(watcher_scope)).order_by(*QUEUE_ORDER)[
            : PAGE_SIZE + 1
        ]
    )
    empty_watching = executed(
        queries.with_row_data(queries.watching_proposals(scope)).order_by(*WATCHING_ORDER)[: PAGE_SIZE + 1]
    )
    empty_side = {
        "id": "R6x",
        "what": f"the empty side at {LARGE:,}: queue page query of one who can decide none (info)",
        "baseline": "",
        "measured": f"{empty_queue:.1f} ms (watching list of one who decides all: {empty_watching:.1f} ms)",
        "ratio": None,
        "target": "",
        "met": None,
        "note": "EXPLAIN ANALYZE execution time of the page query alone, one run",
    }
    rows = []
    for id_, what, small, small_queries, large, large_queries in (
        (
            "R6",
            f"queue page, {LARGE:,} waiting vs {SMALL}",
            small_queue,
            small_queue_queries,
            large_queue,
            large_queue_queries,
        ),
        (
            "R6w",
            f"watching page, {LARGE:,} vs {SMALL} (info)",
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
                "note": f"p50 {ms(percentile(small, 0.5))} vs {ms(percentile(large, 0.5))}; p95 ratio's "
                f"{spread(part_ratios(small, large, 0.95), label='quarters of the samples')}"
                + (
                    f"; plan: {queue_plan}; {LARGE - SMALL:,} rows made in {built:.0f} s"
                    if id_ == "R6"
                    else ""
                ),
            }
        )
    (before, before_queries), (after, after_queries) = ticks_before, ticks_after
    tick_ratio = percentile(after, 0.5) / percentile(before, 0.5)
    rows.append(
        {
            "id": "R6t",
            "what": f"worker tick with nothing due, {LARGE + SMALL:,} waiting vs {2 * SMALL}",
            "baseline": f"p50 {ms(percentile(before, 0.5))}, {before_queries} q",
            "measured": f"p50 {ms(percentile(after, 0.5))}, {after_queries} q",
            "ratio": round(tick_ratio, 2),
            "target": "p50 ≤ 1.2x, same queries",
            "met": tick_ratio <= 1.2 and before_queries == after_queries,
            "note": f"{TICKS} ticks each, two processes in turns; p95 {ms(percentile(before, 0.95))} vs "
            f"{ms(percentile(after, 0.95))}; p50 ratio's "
            f"{spread(part_ratios(before, after, 0.5), label='quarters of the ticks')}",
        }
    )
    return [*rows, empty_side]


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=2))
