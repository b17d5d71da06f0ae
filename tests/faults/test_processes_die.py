"""Processes die at chosen points of approve → deliver → consume → outcome, and nothing is lost or
doubled. Real processes on a private PostgreSQL and Redis (tests/faults/servers.py): Reviewer under
Daphne, its worker, the demo refund agent (a2a-sdk) refunding through the fake payments service, which
records every refund by idempotency key and is the ledger of effects checked here.

Each point is a function that takes proposals awaiting review, approves them and does its damage at its
point. The loop runs every point ROUNDS times on BATCH proposals each, asking for the next proposals
while the earlier ones still settle (a lapsing lease or a reconciliation takes seconds); at the end every
proposal must be settled, with one delivered continuation per decision, one refund per approval, and
the audit chain verifying against its checkpoints, in the database and in the files outside it.

How a point is reached without a hook in the product: a vote is cast here (the worker delivers it) or
through the pages (the Daphne that commits it sends it); "while the refund runs" holds the payments
service's own lock, so the agent has consumed its decision and waits inside the refund call while the
fault happens. Nothing is mocked.
"""

import asyncio
import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field

import pytest
from a2a.types import TaskState
from django.db import connection
from django.utils import timezone

from accounts.stepup import SESSION, StepUp
from approvals.models import OutboxMessage, Proposal
from approvals.services.reconcile import TERMINAL_TASK_STATES
from approvals.services.votes import cast_vote
from approvals.states import TERMINAL, State
from audit.chain.verification import verify_chain
from audit.models import AuditEvent, Verb
from examples.downstream import FakePaymentsServer
from tests import factories
from tests.e2e.test_a2a_loop import ask_refund
from tests.e2e.test_gate_holds import Reviewer
from tests.examples.harness import AgentClient
from tests.faults.servers import PrivatePostgres, PrivateRedis
from tests.faults.stack import FaultStack
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.database_independent]  # its own servers

ROUNDS = int(os.environ.get("FAULT_ROUNDS", "4"))  # each point is hit this many times...
BATCH = 2  # ...on this many proposals at once: 7 points x 4 x 2 = 56 proposals
SETTLE_SECONDS = 240  # a send killed mid-call waits out its lease (90 s) before a worker sends it again


@dataclass
class Run:
    stack: FaultStack
    postgres: PrivatePostgres
    redis: PrivateRedis
    payments: FakePaymentsServer
    reviewer: object  # the person voting here (services) and through the pages (`page`)
    page: Reviewer
    kills: Counter = field(default_factory=Counter)  # what was killed or restarted, per point
    notes: Counter = field(default_factory=Counter)  # where exactly a racing kill landed

    def wait(self, condition, what: str, timeout: float = 60):
        return wait_until(condition, what, timeout=timeout, interval=0.1, detail=self.stack.logs)


# --- votes ----------------------------------------------------------------------------------------


def vote_here(run: Run, proposal: Proposal) -> None:
    """The reviewer approves through the services in this process: the committed continuation wakes
    the worker (this process does not send it itself, tests/conftest.py)."""
    cast_vote(
        proposal.id,
        run.reviewer,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=StepUp(SESSION, timezone.now()),  # the policy's window: a session that stepped up now
    )


def vote_on_the_page(run: Run, proposal: Proposal) -> None:
    """The reviewer presses Approve on the page: the Daphne that commits the vote sends the decision."""
    answer = run.page.decide(proposal, "approve", code="")  # the session's step-up, within the window
    assert answer.status_code == 302, answer.text[:1000]


def wait_executing(run: Run, proposals: list[Proposal]) -> None:
    run.wait(
        lambda: all(state_of(p) == State.EXECUTING for p in proposals),
        "the agent to consume its decisions (proposals executing)",
    )


def state_of(proposal: Proposal) -> str:
    return Proposal.objects.values_list("state", flat=True).get(pk=proposal.pk)


def restart_postgres(run: Run, point: str) -> None:
    connection.close()  # this process's connection dies with the server; the next query opens one
    run.postgres.restart()
    run.kills[(point, "postgres restarted")] += 1


# --- the points -----------------------------------------------------------------------------------


def worker_dead_when_the_vote_commits(run: Run, proposals: list[Proposal]) -> None:
    """approve → deliver: nobody is there to deliver; the next worker finds the continuation due."""
    run.stack.kill_worker()
    run.kills[("approve → deliver: worker dead when the vote commits", "worker SIGKILL")] += 1
    for proposal in proposals:
        vote_here(run, proposal)
    run.stack.start_worker()


def daphne_killed_as_it_answers_the_vote(run: Run, proposals: list[Proposal]) -> None:
    """approve → deliver: the Daphne that committed the votes dies as it answers, its direct send
    not started, mid-call or done; a worker sends what is left (at once, or once the lease lapses)."""
    for proposal in proposals:
        vote_on_the_page(run, proposal)
    run.stack.kill_reviewer()
    run.kills[("approve → deliver: Daphne killed as it answers the vote", "Daphne SIGKILL")] += 1
    run.stack.start_reviewer()


def worker_killed_while_delivering(run: Run, proposals: list[Proposal]) -> None:
    """deliver: the worker dies as soon as it has claimed a continuation (or, if the call was faster
    than this test looked, right after delivering it)."""
    for proposal in proposals:
        vote_here(run, proposal)
    rows = OutboxMessage.objects.filter(proposal__in=proposals, kind=OutboxMessage.Kind.CONTINUE)
    run.wait(lambda: rows.filter(attempts__gte=1).exists(), "the worker to claim a continuation")
    run.stack.kill_worker()
    run.kills[("deliver: worker killed holding its claim", "worker SIGKILL")] += 1
    claimed = rows.filter(attempts__gte=1, status=OutboxMessage.Status.PENDING).count()
    run.notes["worker killed with a claimed continuation not yet recorded delivered"] += claimed
    run.stack.start_worker()


def postgres_restarted_after_the_vote(run: Run, proposals: list[Proposal]) -> None:
    """deliver → consume: the database crashes right after the votes committed, while the worker
    delivers and the agent consumes; every process's connections die."""
    for proposal in proposals:
        vote_here(run, proposal)
    restart_postgres(run, "deliver → consume: PostgreSQL crashed right after the vote")


def daphne_killed_while_the_refund_runs(run: Run, proposals: list[Proposal]) -> None:
    """consume → outcome: the decisions are consumed and the refunds in flight when Daphne dies; the
    agent's outcome reports wait for the next Daphne, or are lost and reconciliation settles them."""
    with run.payments.ledger.lock:  # the payments service takes no refund until this block ends
        for proposal in proposals:
            vote_here(run, proposal)
        wait_executing(run, proposals)
        run.stack.kill_reviewer()
        run.kills[("consume → outcome: Daphne killed while the refund runs", "Daphne SIGKILL")] += 1
    run.stack.start_reviewer()


def postgres_restarted_while_the_refund_runs(run: Run, proposals: list[Proposal]) -> None:
    """consume → outcome: the database crashes between the consume and the outcome report."""
    with run.payments.ledger.lock:
        for proposal in proposals:
            vote_here(run, proposal)
        wait_executing(run, proposals)
        restart_postgres(run, "consume → outcome: PostgreSQL crashed while the refund runs")


def redis_dead_across_the_vote(run: Run, proposals: list[Proposal]) -> None:
    """approve: the channel layer is gone while the votes commit (their live updates cannot be
    broadcast); the decision must leave regardless."""
    run.redis.kill()
    run.kills[("approve: Redis dead across the vote", "Redis SIGKILL and restart")] += 1
    for proposal in proposals:
        vote_on_the_page(run, proposal)
    run.redis.start()


POINTS = (
    worker_killed_while_delivering,
    daphne_killed_as_it_answers_the_vote,
    worker_dead_when_the_vote_commits,
    postgres_restarted_after_the_vote,
    daphne_killed_while_the_refund_runs,
    postgres_restarted_while_the_refund_runs,
    redis_dead_across_the_vote,
)


# --- the loop -------------------------------------------------------------------------------------


def ask(run: Run, number: int) -> Proposal:
    task_id = ask_refund(run.stack, f"Refund EUR {40 + number}.00 for order F{number:04d} (fault loop)")
    return run.wait(
        lambda: Proposal.objects.filter(task_id=task_id, state=State.AWAITING_REVIEW).first(),
        f"the proposal of task {task_id} awaiting review",
    )


def agent_task_state(run: Run, task_id: str) -> str:
    async def read():
        client = await AgentClient.connect(run.stack.agent.url)
        try:
            return TaskState.Name((await client.get(task_id)).status.state)
        finally:
            await client.close()

    return asyncio.run(read())


def waiting_correctly(run: Run, proposal: Proposal) -> bool:
    """Released and never consumed, its continuation delivered, and the agent's task ended: the agent
    could not consume (Reviewer died under its consume call), so it did nothing and ended the task.
    The decision expires unused at its deadline; nothing ran."""
    if proposal.state != State.APPROVED or proposal.decision.consumed_at is not None:
        return False
    pending = OutboxMessage.objects.filter(proposal=proposal, status=OutboxMessage.Status.PENDING)
    return not pending.exists() and agent_task_state(run, proposal.task_id) in TERMINAL_TASK_STATES


def unsettled(run: Run, proposals: list[Proposal]) -> list[Proposal]:
    """Proposals neither terminal nor correctly waiting, or with an outbox message still to settle (a
    send killed mid-call is sent again once its lease lapses, though the agent may have acted on it)."""
    ids = [p.pk for p in proposals]
    pending = set(
        OutboxMessage.objects.filter(proposal__in=ids, status=OutboxMessage.Status.PENDING).values_list(
            "proposal_id", flat=True
        )
    )
    rows = Proposal.objects.filter(pk__in=ids).select_related("decision")
    return [p for p in rows if p.pk in pending or (p.state not in TERMINAL and not waiting_correctly(run, p))]


def unsettled_detail(run: Run, proposals: list[Proposal]) -> str:
    lines = []
    for proposal in unsettled(run, proposals):
        outbox = list(OutboxMessage.objects.filter(proposal=proposal).values("kind", "status", "attempts"))
        lines.append(f"{proposal.id} {proposal.task_id} {proposal.state} outbox={outbox}")
    return "\n".join(lines)


def test_processes_killed_at_every_point_lose_nothing_and_double_nothing(
    on_private_database, private_postgres, private_redis, fault_folder, settings, tmp_path
):
    started = time.monotonic()
    database_url = on_private_database()
    payments = FakePaymentsServer().start()
    stack = FaultStack(
        fault_folder / "stack",
        database_url=database_url,
        redis_url=private_redis.url,
        downstream_url=payments.url,
    )
    settings.AUDIT_CHECKPOINT_DIR = stack.checkpoint_dir  # this process's checkpoints go there too
    settings.REVIEWER_ISSUER = stack.url  # votes cast here sign decisions as the stack does
    tenant = factories.make_tenant()
    factories.make_user("requester", tenant=tenant, principal_id="requester", groups=["finance"])
    reviewer = factories.make_user("reviewer_a", tenant=tenant, groups=["finance"], first_name="Alice")
    # A step-up window: one person casts every vote of the loop (a code is good once per 30 s).
    factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        thresholds=[{"group": "finance", "count": 1}],
        step_up="3600",
    )
    factories.make_agent(
        tenant, push_token=stack.push_token, api_token=stack.api_token, card_url=stack.agent.audience
    )
    page = None
    try:
        stack.start()
        page = Reviewer(stack, reviewer)
        page.http.headers["Connection"] = "close"  # a kept-alive socket would outlive a killed Daphne
        run = Run(stack, private_postgres, private_redis, payments, reviewer, page)
        # The first vote through the pages carries a code; later ones use the session's step-up.
        first = ask(run, 0)
        answer = page.decide(first, "approve")
        assert answer.status_code == 302, answer.text[:1000]
        proposals = [first]
        number = 1
        for _ in range(ROUNDS):
            for point in POINTS:
                batch = [ask(run, number + offset) for offset in range(BATCH)]
                number += BATCH
                point(run, batch)
                proposals += batch
        wait_until(
            lambda: not unsettled(run, proposals),
            "every proposal to settle",
            timeout=SETTLE_SECONDS,
            interval=0.5,
            detail=lambda: unsettled_detail(run, proposals),
        )
        loop_seconds = time.monotonic() - started
        outcomes = check_nothing_lost_or_doubled(run, tenant, proposals)
    finally:
        if page is not None:
            page.close()
        stack.stop()
        payments.stop()
        print(stack.logs())  # shown by pytest only when the test fails
        shutil.copytree(stack.folder, tmp_path / "stack", ignore=shutil.ignore_patterns("*.sqlite3*"))
    report(run, proposals, outcomes, loop_seconds)


def check_nothing_lost_or_doubled(run: Run, tenant, proposals: list[Proposal]) -> Counter:
    """The checks, once everything settled; returns the outcomes by final state."""
    ids = [p.pk for p in proposals]
    final = {p.pk: p for p in Proposal.objects.filter(pk__in=ids).select_related("decision")}
    outcomes = Counter(p.state for p in final.values())
    waiting = [p for p in final.values() if p.state == State.APPROVED]
    assert all(waiting_correctly(run, p) for p in waiting)
    assert set(outcomes) <= {State.SUCCEEDED, State.FAILED, State.APPROVED}, outcomes

    # One continuation per decision, delivered, and recorded delivered once.
    decisions = {p.pk: p.decision for p in final.values()}
    continuations = Counter(
        OutboxMessage.objects.filter(proposal__in=ids, kind=OutboxMessage.Kind.CONTINUE).values_list(
            "proposal_id", "status"
        )
    )
    assert continuations == {(pk, OutboxMessage.Status.DELIVERED): 1 for pk in ids}
    delivered = Counter(
        event.data["outbox_id"] for event in AuditEvent.objects.filter(verb=Verb.OUTBOX_DELIVERED)
    )
    assert set(delivered.values()) == {1}

    # No effect twice, and none without its decision consumed: one refund per succeeded proposal, under
    # its decision's id; none for a proposal that failed or still waits.
    with run.payments.ledger.lock:
        refunds = list(run.payments.ledger.refunds.values())
    succeeded = [p for p in final.values() if p.state == State.SUCCEEDED]
    assert Counter(refund["order_id"] for refund in refunds) == {
        p.action["arguments"]["order_id"]: 1 for p in succeeded
    }
    assert {refund["idempotency_key"] for refund in refunds} == {str(decisions[p.pk].jti) for p in succeeded}

    for chain in (f"tenant:{tenant.id}", "system"):
        result = verify_chain(chain, checkpoint_source=run.stack.checkpoint_dir)
        assert result.ok, result.problems
    return outcomes


def report(run: Run, proposals: list[Proposal], outcomes: Counter, seconds: float) -> None:
    lines = [f"fault loop: {len(proposals)} proposals in {seconds:.0f} s; outcomes {dict(outcomes)}"]
    lines += [f"  {point}: {what} x{count}" for (point, what), count in sorted(run.kills.items())]
    lines += [f"  {note}: {count}" for note, count in run.notes.items()]
    print("\n".join(lines))
