"""Processes die at random moments while A2A traffic flows, and nothing is lost or doubled.

The same stack as tests/faults/test_processes_die.py (Reviewer under Daphne, its worker, the demo refund
agent on a2a-sdk, the fake payments service as the ledger of effects, a private PostgreSQL and Redis),
but no fault waits for a chosen point: a seeded random schedule interleaves the traffic (customers asking
for refunds, which the agent parks and pushes; reviewers approving through the services here and through
the pages; Reviewer's continuations to the agent over A2A, its consumes and outcome reports) with faults
that land wherever the processes happen to be:

- Daphne killed (SIGKILL), started again at once or only after the next vote;
- the worker killed, likewise (its deliveries, expiries and reconciliations stop with it);
- the sequencer killed: the worker (whose thread chains the audit events, AUDIT_SEQUENCING=worker, the
  default on PostgreSQL) killed as soon as events wait to be chained;
- PostgreSQL crashed and restarted (every process's connections die);
- Redis killed, and restarted after the next step;
- any of these while a refund runs (the payments service held, so the agent has consumed its decision
  and waits in the refund call).

FAULT_SEED replays a run (the seed is printed in the report); FAULT_RANDOM_PROPOSALS sets its length. At
the end every proposal is settled, each decision has one delivered continuation, each approval at most one
refund under its decision's id (none without its decision consumed), and the chains verify against their
checkpoints.
"""

import os
import random
import shutil
import time
from collections.abc import Callable

import pytest
from django.db import connection
from django.db.utils import InterfaceError, OperationalError

from approvals.models import Proposal
from approvals.states import State
from audit.models import AuditPending
from examples.downstream import FakePaymentsServer
from tests import factories
from tests.e2e.test_gate_holds import Reviewer
from tests.faults.stack import FaultStack
from tests.faults.test_processes_die import (
    Run,
    ask,
    check_nothing_lost_or_doubled,
    report,
    state_of,
    unsettled,
    unsettled_detail,
    vote_here,
    vote_on_the_page,
)
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.database_independent]  # its own servers

PROPOSALS = int(os.environ.get("FAULT_RANDOM_PROPOSALS", "24"))
SEED = int(os.environ.get("FAULT_SEED") or random.SystemRandom().randrange(2**32))  # noqa: S311
SETTLE_SECONDS = 240  # a send killed mid-call waits out its lease (90 s) before a worker sends it again
SEQUENCER_WORK_SECONDS = 5  # how long the sequencer fault waits for events to be chained


class Chaos:
    """The random schedule's faults, each recorded in `run.kills`."""

    def __init__(self, run: Run, rng: random.Random):
        self.run, self.rng = run, rng
        self.revive: list[Callable[[], object]] = []  # what the next vote brings back

    def count(self, what: str) -> None:
        self.run.kills[("random moments", what)] += 1

    def any_fault(self) -> None:
        fault = self.rng.choice([self.daphne, self.worker, self.sequencer, self.postgres, self.redis])
        fault()

    def _later_or_now(self, start: Callable[[], None]) -> None:
        if self.rng.random() < 0.5:
            self.revive.append(start)  # dead across the next vote, which needs neither
        else:
            time.sleep(self.rng.uniform(0, 1))
            start()

    def daphne(self) -> None:
        self.run.stack.kill_reviewer()
        self.count("Daphne SIGKILL")
        self._later_or_now(self.run.stack.start_reviewer)

    def worker(self) -> None:
        self.run.stack.kill_worker()
        self.count("worker SIGKILL")
        self._later_or_now(self.run.stack.start_worker)

    def sequencer(self) -> None:
        """The worker killed as soon as audit events wait for its sequencer thread (Daphne's intake,
        consumes and outcomes leave theirs pending), or after SEQUENCER_WORK_SECONDS if none came."""
        deadline = time.monotonic() + SEQUENCER_WORK_SECONDS
        while not AuditPending.objects.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        waiting = AuditPending.objects.count()
        self.run.stack.kill_worker()
        self.count("sequencer (the worker) SIGKILL")
        if waiting:
            self.run.notes["sequencer killed while events waited to be chained"] += 1
        self._later_or_now(self.run.stack.start_worker)

    def postgres(self) -> None:
        connection.close()  # this process's connection dies with the server; the next query opens one
        self.run.postgres.restart()
        self.count("PostgreSQL crashed and restarted")

    def redis(self) -> None:
        self.run.redis.kill()
        self.count("Redis SIGKILL and restart")
        self.revive.append(self.run.redis.start)

    def bring_back(self) -> None:
        while self.revive:
            self.revive.pop(0)()


def retried(action: Callable[[], object], what: str) -> None:
    """`action` again until it gets through a database restart (the restart itself is awaited, so
    this is at most a few tries)."""
    for _ in range(20):
        try:
            action()
            return
        except (OperationalError, InterfaceError):
            connection.close()
            time.sleep(0.5)
    raise AssertionError(f"{what}: the database did not come back in 20 tries")


def vote(run: Run, chaos: Chaos, proposal: Proposal, *, on_the_page: bool) -> None:
    """Approve, through the pages (the Daphne that commits sends the decision) or here (the worker does);
    whatever the previous fault left dead comes back after it."""
    if on_the_page and run.stack.reviewer is not None:
        vote_on_the_page(run, proposal)
    else:
        retried(lambda: vote_here(run, proposal), "a vote")
    chaos.bring_back()


def during_a_refund(run: Run, chaos: Chaos, proposal: Proposal) -> None:
    """A fault while the agent, having consumed its decision, waits in the refund call."""
    with run.payments.ledger.lock:  # the payments service takes no refund until this block ends
        retried(lambda: vote_here(run, proposal), "a vote")
        run.wait(lambda: state_of(proposal) == State.EXECUTING, "the agent to consume its decision")
        time.sleep(chaos.rng.uniform(0, 0.5))
        chaos.any_fault()
        chaos.bring_back()


def test_processes_killed_at_random_moments_under_a2a_traffic_lose_nothing_and_double_nothing(
    on_private_database, private_postgres, private_redis, fault_folder, settings, tmp_path
):
    started = time.monotonic()
    rng = random.Random(SEED)  # noqa: S311 (a replayable schedule, not a secret)
    database_url = on_private_database()
    payments = FakePaymentsServer().start()
    stack = FaultStack(
        fault_folder / "random",
        database_url=database_url,
        redis_url=private_redis.url,
        downstream_url=payments.url,
    )
    settings.AUDIT_CHECKPOINT_DIR = stack.checkpoint_dir  # this process's checkpoints go there too
    settings.REVIEWER_ISSUER = stack.url  # votes cast here sign decisions as the stack does
    tenant = factories.make_tenant()
    factories.make_user("requester", tenant=tenant, principal_id="requester", groups=["finance"])
    reviewer = factories.make_user("reviewer_a", tenant=tenant, groups=["finance"], first_name="Alice")
    factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        thresholds=[{"group": "finance", "count": 1}],
        step_up="3600",  # one person casts every vote; a code is good once per 30 s
    )
    factories.make_agent(
        tenant, push_token=stack.push_token, api_token=stack.api_token, card_url=stack.agent.audience
    )
    page = None
    proposals: list[Proposal] = []
    run: Run | None = None
    try:
        stack.start()
        page = Reviewer(stack, reviewer)
        page.http.headers["Connection"] = "close"  # a kept-alive socket would outlive a killed Daphne
        run = Run(stack, private_postgres, private_redis, payments, reviewer, page)
        chaos = Chaos(run, rng)
        first = ask(run, 0)
        assert page.decide(first, "approve").status_code == 302  # with a code: the session steps up
        proposals.append(first)
        waiting: list[Proposal] = []
        number = 1
        while number < PROPOSALS or waiting:
            step = rng.choices(["ask", "vote", "fault", "refund"], weights=[3, 3, 2, 1])[0]
            if step == "ask" and number < PROPOSALS or not waiting:
                chaos.bring_back()  # asking needs Daphne, the worker's wake-ups and Redis
                asked = ask(run, number)
                number += 1
                proposals.append(asked)
                waiting.append(asked)
            elif step == "vote":
                proposal = waiting.pop(rng.randrange(len(waiting)))
                vote(run, chaos, proposal, on_the_page=rng.random() < 0.3)
            elif step == "fault" and not chaos.revive:
                time.sleep(rng.uniform(0, 1.5))  # somewhere in what the last steps set going
                chaos.any_fault()
            elif step == "refund" and not chaos.revive:
                during_a_refund(run, chaos, waiting.pop(rng.randrange(len(waiting))))
        chaos.bring_back()
        settled_run = run
        wait_until(
            lambda: not unsettled(settled_run, proposals),
            "every proposal to settle",
            timeout=SETTLE_SECONDS,
            interval=0.5,
            detail=lambda: unsettled_detail(settled_run, proposals),
        )
        loop_seconds = time.monotonic() - started
        outcomes = check_nothing_lost_or_doubled(settled_run, tenant, proposals)
    finally:
        if page is not None:
            page.close()
        stack.stop()
        payments.stop()
        print(f"FAULT_SEED={SEED}")
        print(stack.logs())  # shown by pytest only when the test fails
        shutil.copytree(stack.folder, tmp_path / "stack", ignore=shutil.ignore_patterns("*.sqlite3*"))
    assert run is not None
    report(run, proposals, outcomes, loop_seconds)
    print(f"FAULT_SEED={SEED}: {sum(run.kills.values())} faults at random moments")
