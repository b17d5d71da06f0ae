"""What R1 and R1a share: the production path on loopback, timed from outside.

A scratch database (PostgreSQL by default: BENCH_DATABASE_URL, whose name must contain "bench"; it is
dropped and created again), Reviewer under Daphne, one `run_worker` at its default interval (woken by
commits), and the demo refund agent (a2a-sdk, its own process, a ledger file). The processes are the
e2e tests' (tests/e2e/conftest.py `Stack`), so the bench runs exactly what the tests check.

The baseline is a bare A2A GetTask round trip to the same agent, over one kept-alive client, measured in
the same run.
"""

import asyncio
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.common import spread

ROOT = Path(__file__).resolve().parent.parent

# BENCH_DB_PREFIX (bench/common.py) keeps side-by-side runs on one server apart.
DEFAULT_DATABASE_URL = (
    f"postgres://postgres@127.0.0.1:5432/{os.environ.get('BENCH_DB_PREFIX', '')}bench_delivery"
)


def setup_django(data_dir: Path) -> str:
    """Point this process at a fresh scratch database and set Django up; returns the database URL."""
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL)
    if url.startswith("postgres"):
        import psycopg

        name = url.rsplit("/", 1)[1]
        if "bench" not in name:
            raise SystemExit(f"refusing to drop {name!r}: a bench database's name contains 'bench'")
        admin = url.rsplit("/", 1)[0] + "/postgres"
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            connection.execute(f'CREATE DATABASE "{name}"')
    os.environ["DATABASE_URL"] = url
    os.environ["REVIEWER_DATA_DIR"] = str(data_dir / "data")
    os.environ["REVIEWER_SIGNING_KEY_DIR"] = str(data_dir / "keys")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewer.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return url


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict:
    return {
        "p50_ms": round(statistics.median(values) * 1000, 2),
        "p95_ms": round(percentile(values, 95) * 1000, 2),
        "n": len(values),
    }


class DeliveryStack:
    """Reviewer + worker + refund agent running on the scratch database, with one tenant and people."""

    def __init__(self, folder: Path, *, outcome: str):
        from django.conf import settings

        from approvals.worker.loop import POLL_SECONDS
        from tests.e2e.conftest import Stack

        folder.mkdir(parents=True, exist_ok=True)
        # Reviewer's Daphne records each request's time inside it (bench/timed_asgi.py).
        self.timings = folder / "reviewer-timings.txt"
        os.environ["BENCH_TIMINGS_FILE"] = str(self.timings)
        self.stack = Stack(  # the worker's default interval: it is woken by commits
            folder, worker_interval=str(POLL_SECONDS), app="bench.timed_asgi:application"
        )
        self.stack.start()
        try:
            self._register(settings, outcome)
        except BaseException:
            self.stack.stop()  # never leave the servers running behind a failed setup
            raise

    def _register(self, settings, outcome: str) -> None:
        from tests import factories

        settings.REVIEWER_ISSUER = self.stack.url  # votes cast here sign as the Daphne the agent trusts
        # Decisions committed here are sent from here (approvals/worker/delivery.py), to the loopback agent.
        settings.AGENT_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]
        self.tenant = factories.make_tenant()
        factories.make_user("requester", tenant=self.tenant, principal_id="requester", groups=["finance"])
        self.reviewer = factories.make_user("reviewer_a", tenant=self.tenant, groups=["finance"])
        self.policy = {
            "tool_pattern": "payments.refund",
            "outcome": outcome,
            "thresholds": [{"group": "finance", "count": 1}],
            "step_up": "3600",  # a fresh session step-up counts: votes need no new code each
        }
        factories.make_policy(self.tenant, "refunds", **self.policy)
        factories.make_agent(
            self.tenant,
            push_token=self.stack.push_token,
            api_token="agent-api-token",  # noqa: S106 (the demo agent's test token)
            card_url=self.stack.agent.audience,
        )
        self.ledger = self.stack.agent.state_dir / "ledger.jsonl"

    def act_without_consume(self) -> None:
        """Activate a new version of the refund policy with `consume_online: false` (docs/policy-format.md):
        its decisions say `consume: false`, and the agent acts on the verified token without calling
        Reviewer back. The contract's option for reversible, low-risk tools, never for irreversible ones."""
        from tests import factories

        factories.make_policy(self.tenant, "refunds", **self.policy, consume_online=False)

    def ledger_lines(self) -> int:
        try:
            return self.ledger.read_bytes().count(b"\n")
        except FileNotFoundError:
            return 0

    def wait_ledger(self, count: int, deadline: float = 30) -> float:
        """Poll the ledger (1 ms) until it has `count` lines; returns the perf_counter when it did."""
        end = time.perf_counter() + deadline
        while time.perf_counter() < end:
            if self.ledger_lines() >= count:
                return time.perf_counter()
            time.sleep(0.001)  # measurement resolution, not synchronization
        raise RuntimeError(f"ledger line {count} not within {deadline}s\n{self.stack.logs()[-4000:]}")

    def time_inside_reviewer(self, since: float, until: float) -> float:
        """Milliseconds Reviewer's Daphne spent inside the requests it got between two wall-clock times
        (time.time()): its share of a call; the rest of the call is the agent's, a2a-sdk's and the
        network's (the worker's own work, e.g. a continuation's delivery, is not in it)."""
        total = 0.0
        for line in self.timings.read_text().splitlines():
            start, end = (float(value) for value in line.split()[:2])
            if since <= start and end <= until:
                total += end - start
        return total * 1000

    def stop(self) -> None:
        self.stack.stop()


async def agent_client(stack: DeliveryStack):
    from tests.examples.harness import AgentClient

    return await AgentClient.connect(stack.stack.agent.url)


def refund_message(n: int, webhook: str, push_token: str):
    from a2a.types import Message, Part, Role, SendMessageConfiguration, TaskPushNotificationConfig

    message = Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_USER,
        parts=[Part(text=f"Please refund EUR {10 + n}.00 for order {5000 + n}")],
        metadata={"principal": {"id": "requester", "display": "Rita Requester"}},
    )
    configuration = SendMessageConfiguration(
        return_immediately=True,
        task_push_notification_config=TaskPushNotificationConfig(url=webhook, token=push_token),
    )
    return message, configuration


def cpu_ticks(pid: int) -> int:
    """A process's user + system CPU so far, in clock ticks (/proc/<pid>/stat, fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


async def agent_idle(stack: "DeliveryStack", task_id: str | None = None, *, quiet: float = 0.1) -> None:
    """Wait until the agent is idle: the task's proposal settled (its outcome reported to Reviewer),
    then the agent's process using no CPU for `quiet` seconds (its last pushes and its task's final
    state written). A baseline taken sooner times GetTask against an agent still finishing the last
    refund; a measured run started sooner shares the agent with that work. Gives up after 10 s."""
    from approvals.models import Proposal
    from approvals.states import TERMINAL

    end = time.perf_counter() + 10
    if task_id is not None:
        while time.perf_counter() < end:
            if Proposal.objects.filter(task_id=task_id, state__in=TERMINAL).exists():
                break
            await asyncio.sleep(0.005)
    pid = stack.stack.agent.process.pid
    quiet_since, ticks = time.perf_counter(), cpu_ticks(pid)
    while time.perf_counter() < end:
        await asyncio.sleep(0.02)
        now = cpu_ticks(pid)
        if now != ticks:
            quiet_since, ticks = time.perf_counter(), now
        elif time.perf_counter() - quiet_since >= quiet:
            return


async def bare_round_trips(stack: "DeliveryStack", client, task_id: str, count: int) -> list[float]:
    """The baseline: GetTask of one task, `count` times, over one kept-alive client, once the agent is
    idle (`agent_idle`): as idle as it is when each measured run starts."""
    from a2a.types import GetTaskRequest

    await agent_idle(stack, task_id)
    times = []
    for _ in range(count):
        start = time.perf_counter()
        await client.client.get_task(GetTaskRequest(id=task_id))
        times.append(time.perf_counter() - start)
    return times


def scratch_folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="reviewer-bench-"))


def row(bench_id: str, what: str, baseline: list[float], measured: list[float], target: str) -> dict:
    """One row of the bench table (the shape bench/run.py reads): p50 and p95 of both sides, as "ratio"
    the one the target bounds first (both under "ratios"), and "met" against every bound the target
    names ("p50 ≤ 3x, p95 ≤ 5x")."""
    base, meas = summary(baseline), summary(measured)
    ratios = {
        "p50": round(meas["p50_ms"] / base["p50_ms"], 2),
        "p95": round(meas["p95_ms"] / base["p95_ms"], 2),
    }
    found = re.findall(r"(p50|p95) ≤ ([0-9.]+)x", target)
    bounds = dict(found)
    shown = found[0][0] if found else "p50"  # the table's ratio: the first one the target bounds
    return {
        "id": bench_id,
        "what": what,
        "baseline": f"p50 {base['p50_ms']} / p95 {base['p95_ms']} ms (n={base['n']})",
        "measured": f"p50 {meas['p50_ms']} / p95 {meas['p95_ms']} ms (n={meas['n']})",
        "ratio": ratios[shown],
        "ratios": ratios,
        "met": all(ratios[key] <= float(bound) for key, bound in bounds.items()),
        "note": f"p50 {ratios['p50']}x, p95 {ratios['p95']}x; "
        f"p50 ratio's {spread(round_ratios(baseline, measured))}",
        "target": target,
    }


ROUNDS = 3  # a row's runs are cut into this many rounds, in order, for its spread


def round_ratios(baseline: list[float], measured: list[float]) -> list[float]:
    """The p50 ratio of each of ROUNDS consecutive parts of a series (each run with its baselines)."""
    per_run = len(baseline) // len(measured)
    size = max(len(measured) // ROUNDS, 1)
    ratios = []
    for start in range(0, size * ROUNDS, size):
        runs, bases = measured[start : start + size], baseline[start * per_run : (start + size) * per_run]
        if runs and bases:
            ratios.append(statistics.median(runs) / statistics.median(bases))
    return ratios


def delivery_stages(proposal_id, *, ledger_at: float, continuation: bool = True) -> dict:
    """Where one decision's time went (wall clock, ms after the decision): the worker delivered the
    continuation (claim + SendMessage + record; `continuation=False` when the agent took the decision
    from the intake answer and Reviewer holds the continuation), the agent consumed the decision (its
    call back to Reviewer), the ledger line was seen."""
    from approvals.models import Decision, OutboxMessage

    end = time.perf_counter() + 10
    while True:  # the agent may refund before the worker has recorded its SendMessage as delivered
        decision = Decision.objects.get(proposal_id=proposal_id)
        message = OutboxMessage.objects.get(proposal_id=proposal_id, kind=OutboxMessage.Kind.CONTINUE)
        delivered = message.delivered_at or not continuation
        consumed = decision.consumed_at or not decision.consume_required
        if (delivered and consumed) or time.perf_counter() > end:
            break
        time.sleep(0.01)
    start = decision.issued_at.timestamp()
    stages = {}
    if continuation:
        stages["decision → continuation delivered"] = (message.delivered_at.timestamp() - start) * 1000
    if decision.consume_required:
        stages["decision → consumed by the agent"] = (decision.consumed_at.timestamp() - start) * 1000
    stages["decision → ledger line seen"] = (ledger_at - start) * 1000
    return stages


# A stage of a call's profile: the time Reviewer's Daphne spent inside the call's requests to it.
INSIDE_REVIEWER = "inside Reviewer's Daphne"


def stage_medians(stages: list[dict]) -> dict:
    return {name: round(statistics.median(s[name] for s in stages), 1) for name in stages[0]}


OPTION_NOTE = (
    "policy `consume_online: false`: the agent acts on the verified decision without the consume call "
    "(the contract's option for reversible, low-risk tools; the default consumes)"
)


async def consumed_then_option(
    stack: "DeliveryStack", series, iterations: int, *, rows: list[tuple[str, str]], target: str
) -> list[dict]:
    """Two rows, named by `rows` ((id, what) each): `series(client, numbers)` on the default policy,
    then, once a new version of it says `consume_online: false`, on the next `iterations` refunds (the
    option's row). `series` returns (baseline, measured, stages, task ids); every decision of a row's
    tasks must say `consume` as its policy does."""
    from approvals.models import Decision

    client = await agent_client(stack)
    results = []
    try:
        for number, ((bench_id, what), consume) in enumerate(zip(rows, (True, False), strict=True)):
            if not consume:
                stack.act_without_consume()
            refunds = range(number * iterations, (number + 1) * iterations)
            baseline, measured, stages, task_ids = await series(client, refunds)
            claims = Decision.objects.filter(proposal__task_id__in=task_ids).values_list(
                "consume_required", flat=True
            )
            if set(claims) != {consume}:
                raise SystemExit(f"the decisions of {bench_id} were not all consume={consume}")
            result = row(bench_id, what, baseline, measured, target)
            result["profile"] = stage_medians(stages)
            if INSIDE_REVIEWER in result["profile"]:
                result["note"] += (
                    f"; Reviewer's Daphne inside the call p50 {result['profile'][INSIDE_REVIEWER]} ms of "
                    f"{summary(measured)['p50_ms']} ms; the rest is the agent's, a2a-sdk's and the worker's"
                )
            results.append(result)
    finally:
        await client.close()
    results[1]["note"] += "; " + OPTION_NOTE
    return results


def measure_on_stack(outcome: str, measure, iterations: int) -> list[dict]:
    """Django on a scratch folder, a DeliveryStack whose refund policy answers `outcome`, then the async
    `measure(stack, iterations)` (its rows) in one event loop; the stack is stopped whatever happens."""
    folder = scratch_folder()
    setup_django(folder)
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # one thread: the ORM between awaits, nothing concurrent
    stack = DeliveryStack(folder / "stack", outcome=outcome)
    try:
        return asyncio.run(measure(stack, iterations))
    finally:
        stack.stop()


async def send_refund(client, stack: "DeliveryStack", n: int) -> str:
    """The agent is asked for refund number `n` (SendMessage, as the demo client asks); its task id."""
    from a2a.types import SendMessageRequest

    message, configuration = refund_message(n, stack.stack.webhook, stack.stack.push_token)
    request = SendMessageRequest(message=message, configuration=configuration)
    replies = [reply async for reply in client.client.send_message(request)]
    return replies[-1].task.id
