"""R1: the final vote committed → the agent's verified, consumed side effect (its ledger line), against a
bare A2A GetTask round trip to the same agent (target: p50 ≤ 3x, p95 ≤ 5x).

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_delivery REDIS_URL=redis://127.0.0.1:6379/9 \\
        .venv/bin/python bench/r1_vote_to_side_effect.py [N]

The path has two round trips by design (the continuation to the agent, the agent's consume back to
Reviewer), plus the worker's claim and record. See bench/delivery_stack.py for the stack.

R1o: the same path once the policy's new version says `consume_online: false`: one round trip, the
continuation; the agent acts on the verified decision without calling Reviewer back.
"""

import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.delivery_stack import (  # noqa: E402 (after the path)
    DeliveryStack,
    bare_round_trips,
    consumed_then_option,
    delivery_stages,
    measure_on_stack,
    send_refund,
)

TARGET = "p50 ≤ 3x, p95 ≤ 5x"


def main(iterations: int = 30) -> list[dict]:
    return measure_on_stack("require_approval", _measure, iterations)


async def _measure(stack: DeliveryStack, iterations: int) -> list[dict]:
    async def series(client, numbers: range):
        from django.utils import timezone

        from accounts.stepup import SESSION, StepUp
        from approvals.models import Proposal
        from approvals.states import State

        measured, baseline, stages, task_ids = [], [], [], []
        for n in numbers:
            task_id = await send_refund(client, stack, n)
            task_ids.append(task_id)
            proposal = _wait(
                lambda task_id=task_id: Proposal.objects.filter(
                    task_id=task_id, state=State.AWAITING_REVIEW
                ).first()
            )
            # In a thread, like a request's: the vote's on-commit hooks must not run in this event loop.
            step_up = StepUp(SESSION, timezone.now())
            committed = await asyncio.to_thread(_vote, proposal, stack.reviewer, step_up)
            measured.append(stack.wait_ledger(n + 1) - committed)
            stages.append(delivery_stages(proposal.id, ledger_at=time.time()))
            baseline += await bare_round_trips(client, task_id, 3)
        return baseline, measured, stages, task_ids

    rows = [
        ("R1", "final vote committed → agent's verified, consumed refund (ledger line) vs bare A2A GetTask"),
        ("R1o", "R1's path, decision verified without the consume call"),
    ]
    return await consumed_then_option(stack, series, iterations, rows=rows, target=TARGET)


def _vote(proposal, reviewer, step_up) -> float:
    """Cast the final vote; returns the perf_counter of its commit. The clock starts at the commit, not
    when cast_vote returns: the vote's own after-commit hooks (audit sequencing, the broadcast, the
    direct send's hand-off) run before it returns, while the continuation may already be on its way.
    cast_vote's transaction is durable (nothing may wrap it), so the commit is timed by wrapping this
    connection's commit() for the one call: Django's atomic block calls it, then runs the hooks."""
    from django.db import connection

    from approvals.services.votes import cast_vote  # Django is set up by now (measure_on_stack)

    marks = []
    commit = connection.commit

    def timed_commit():
        commit()
        marks.append(time.perf_counter())

    connection.commit = timed_commit
    try:
        cast_vote(
            proposal.id,
            reviewer,
            verdict="approve",
            digest_seen=proposal.action_digest,
            step_up=step_up,
        )
    finally:
        del connection.commit  # the backend's own method again
    return marks[0]


def _wait(find, deadline: float = 30):
    end = time.perf_counter() + deadline
    while time.perf_counter() < end:
        found = find()
        if found:
            return found
        time.sleep(0.005)
    raise RuntimeError("the proposal did not arrive")


if __name__ == "__main__":
    print(json.dumps(main(*(int(a) for a in sys.argv[1:2])), indent=2))
