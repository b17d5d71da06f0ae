"""R1: the reviewer's final vote, POSTed on the proposal's page → the agent's verified, consumed side
effect (its ledger line), against a bare A2A GetTask round trip to the same agent (target: p50 ≤ 3x,
p95 ≤ 5x).

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_delivery REDIS_URL=redis://127.0.0.1:6379/9 \\
        .venv/bin/python bench/r1_vote_to_side_effect.py [N]

The clock starts when the reviewer's browser would send the vote: the approve form's POST to the
proposal's page (`/proposals/<id>/decide`) over HTTP to the stack's Daphne, from a person signed in over
HTTP with password and one-time code (the first vote with a code, the next ones within the policy's
3600 s step-up window that it opened, as a reviewer deciding one proposal after another), with the
CSRF token of the session, and it stops at the agent's ledger line. So the
time includes the request, the view (its step-up check, `cast_vote`, the page hash) and the answer's
after-commit hooks that Daphne runs, as a reviewer's vote pays them. The path then has two round trips
by design (the continuation to the agent, the agent's consume back to Reviewer), plus the worker's
record. See bench/delivery_stack.py for the stack.

Every vote and every baseline starts with the agent idle (`delivery_stack.agent_idle`: the previous
refund's proposal settled, the agent's process quiet), and they alternate: one vote, then three GetTask
round trips, then the next vote.

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
    INSIDE_REVIEWER,
    DeliveryStack,
    agent_idle,
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
    reviewer = await asyncio.to_thread(PageReviewer, stack.stack.url, stack.reviewer)

    async def series(client, numbers: range):
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
            await agent_idle(stack)  # its announcement's pushes done: the vote starts as the baseline does
            code = reviewer.code()  # typed before the click
            started, started_at = time.perf_counter(), time.time()
            answer = await asyncio.to_thread(reviewer.approve, proposal, code)
            if answer.status_code != 302:
                raise SystemExit(f"the vote was refused: HTTP {answer.status_code} {answer.text[:500]}")
            measured.append(stack.wait_ledger(n + 1) - started)
            ledger_at = time.time()
            stages.append(delivery_stages(proposal.id, ledger_at=ledger_at))
            stages[-1][INSIDE_REVIEWER] = stack.time_inside_reviewer(started_at, ledger_at)
            baseline += await bare_round_trips(stack, client, task_id, 3)
        return baseline, measured, stages, task_ids

    rows = [
        (
            "R1",
            "vote POSTed on the page (Daphne) → agent's verified, consumed refund (ledger line) vs GetTask",
        ),
        ("R1o", "R1's path, decision verified without the consume call"),
    ]
    try:
        return await consumed_then_option(stack, series, iterations, rows=rows, target=TARGET)
    finally:
        reviewer.close()


class PageReviewer:
    """The reviewer at the proposal's page, over HTTP to the stack's Daphne, as tests/e2e/test_gate_holds.py's
    `Reviewer` signs in: the login page for the CSRF cookie, then password and one-time code."""

    def __init__(self, url: str, user):
        import httpx

        from tests import factories

        self.user = user
        self.fresh = False
        self.http = httpx.Client(base_url=url, timeout=30)
        self.http.get("/accounts/login/")
        signed_in = self.http.post(
            "/accounts/login/",
            data={
                "csrfmiddlewaretoken": self.http.cookies["csrftoken"],
                "username": user.username,
                "password": factories.PASSWORD,
                "otp_token": factories.totp_code(user),
            },
        )
        if signed_in.status_code != 302:
            raise SystemExit(f"the reviewer could not sign in: HTTP {signed_in.status_code}")

    def code(self) -> str:
        """The one-time code for the next vote: one for the first, none after it (a vote with a code marks
        the session fresh, and the policy's step-up window, 3600 s, covers the next votes)."""
        from tests import factories

        return "" if self.fresh else factories.totp_code(self.user)

    def approve(self, proposal, code: str):
        """The page's approve form, as posted from the browser."""
        self.fresh = True
        return self.http.post(
            f"/proposals/{proposal.id}/decide",
            data={
                "csrfmiddlewaretoken": self.http.cookies["csrftoken"],
                "action": "approve",
                "digest": proposal.action_digest,
                "reason": "",
                "otp_code": code,
            },
        )

    def close(self) -> None:
        self.http.close()


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
