"""R1a: a policy-allowed request, from the SendMessage that asks the agent (sent) to the decision
verified and consumed by the agent (its ledger line), against a bare A2A GetTask round trip to the same
agent (target: p50 ≤ 3x).

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_delivery REDIS_URL=redis://127.0.0.1:6379/9 \\
        .venv/bin/python bench/r1a_allowed_to_verified.py [N]

The path: the agent stores the request and announces it (Reviewer's intake evaluates the policy:
allowed, decision signed and in the answer), the agent verifies the decision from that answer,
consumes it (a call back to Reviewer) and refunds. It asked for the decision in the answer (`Prefer:
decision-in-answer`), so Reviewer holds the task's continuation meanwhile (and, once due, records it
without sending it: the agent had started). See bench/delivery_stack.py for the stack.

Every run and every baseline starts with the agent idle (`delivery_stack.agent_idle`: the previous
refund's proposal settled, the agent's process quiet), and they alternate: one request, then three
GetTask round trips, then the next request.

R1ao: the same path once the policy's new version says `consume_online: false` (docs/policy-format.md),
the contract's option for reversible, low-risk tools: the agent acts on the verified decision from the
answer, with no consume call back to Reviewer.
"""

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.delivery_stack import (  # noqa: E402 (after the path)
    INSIDE_REVIEWER,
    DeliveryStack,
    bare_round_trips,
    consumed_then_option,
    delivery_stages,
    measure_on_stack,
    send_refund,
)

TARGET = "p50 ≤ 3x"


def main(iterations: int = 30) -> list[dict]:
    return measure_on_stack("allow", _measure, iterations)


async def _measure(stack: DeliveryStack, iterations: int) -> list[dict]:
    async def series(client, numbers: range):
        from approvals.models import Proposal

        measured, baseline, stages, task_ids = [], [], [], []
        for n in numbers:
            sent, sent_at = time.perf_counter(), time.time()
            task_id = await send_refund(client, stack, n)
            measured.append(stack.wait_ledger(n + 1) - sent)
            ledger_at = time.time()
            task_ids.append(task_id)
            proposal_id = Proposal.objects.get(task_id=task_id).id
            # The agent asked for the decision in the answer: Reviewer holds the continuation.
            stages.append(delivery_stages(proposal_id, ledger_at=ledger_at, continuation=False))
            stages[-1][INSIDE_REVIEWER] = stack.time_inside_reviewer(sent_at, ledger_at)
            baseline += await bare_round_trips(stack, client, task_id, 3)
        return baseline, measured, stages, task_ids

    rows = [
        ("R1a", "policy-allowed: SendMessage → decision verified and consumed (ledger line) vs GetTask"),
        ("R1ao", "R1a's path, decision verified without the consume call"),
    ]
    return await consumed_then_option(stack, series, iterations, rows=rows, target=TARGET)


if __name__ == "__main__":
    print(json.dumps(main(*(int(a) for a in sys.argv[1:2])), indent=2))
