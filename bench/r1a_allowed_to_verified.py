"""R1a: a policy-allowed request, from the agent parking its task (SendMessage sent) to the decision
verified and consumed by the agent (its ledger line), against a bare A2A GetTask round trip to the same
agent (target: p50 ≤ 3x).

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_delivery REDIS_URL=redis://127.0.0.1:6379/9 \\
        .venv/bin/python bench/r1a_allowed_to_verified.py [N]

The path: the agent parks and pushes (Reviewer's intake evaluates the policy: allowed, decision signed,
continuation queued, worker woken), the worker continues the task, the agent verifies the decision,
consumes it (a call back to Reviewer) and refunds. See bench/delivery_stack.py for the stack.
"""

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.delivery_stack import (  # noqa: E402 (after the path)
    DeliveryStack,
    agent_client,
    bare_round_trips,
    delivery_stages,
    refund_message,
    row,
    run,
    scratch_folder,
    setup_django,
    stage_medians,
)

TARGET = "p50 ≤ 3x"


def main(iterations: int = 30) -> list[dict]:
    folder = scratch_folder()
    setup_django(folder)
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # one thread: the ORM between awaits, nothing concurrent
    stack = DeliveryStack(folder / "stack", outcome="allow")
    try:
        return [run(_measure(stack, iterations))]
    finally:
        stack.stop()


async def _measure(stack: DeliveryStack, iterations: int) -> dict:
    from a2a.types import SendMessageRequest

    from approvals.models import Proposal

    client = await agent_client(stack)
    measured, baseline, stages = [], [], []
    try:
        for n in range(iterations):
            message, configuration = refund_message(n, stack.stack.webhook, stack.stack.push_token)
            sent = time.perf_counter()
            replies = [
                r
                async for r in client.client.send_message(
                    SendMessageRequest(message=message, configuration=configuration)
                )
            ]
            measured.append(stack.wait_ledger(n + 1) - sent)
            task_id = replies[-1].task.id
            stages.append(delivery_stages(Proposal.objects.get(task_id=task_id).id, ledger_at=time.time()))
            baseline += await bare_round_trips(client, task_id, 3)
    finally:
        await client.close()
    result = row(
        "R1a",
        "policy-allowed request: agent parks → decision verified and consumed (ledger line) vs bare GetTask",
        baseline,
        measured,
        TARGET,
    )
    result["profile"] = stage_medians(stages)
    return result


if __name__ == "__main__":
    print(json.dumps(main(*(int(a) for a in sys.argv[1:2])), indent=2))
