"""The lock-out attack, on the real server: one agent's token opens far more decision waits than the Daphne
process has request slots (MAX_CONCURRENT_REQUESTS), and keeps them open.

A wait holds no slot (approvals/decision_wait.py), so meanwhile the sign-in page, a reviewer's queue and
another tenant's intake answer as usual, the agent's next wait past its cap is a 429 with Retry-After,
and a reviewer's approval (cast on the same server, over HTTP) wakes the waits on that proposal with the
signed decision. Both agents are pull agents (no card URL): no outbox row is ever written. Runs on SQLite
and PostgreSQL: the vote and the waits share one process, so its channel layer carries the wake-up
without Redis."""

import asyncio
import threading

import httpx
import pytest

from approvals.models import Decision, OutboxMessage
from reviewer_gate import build_request
from tests import factories
from tests.e2e.conftest import Stack, _running
from tests.e2e.test_fanout_redis import signed_in
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SLOTS = 4  # request slots of the Daphne process under attack
WAITS = 100  # the waits the attacker may keep open (its cap): 25 times the slots
ATTACKER_TOKEN = "attacker-token"  # noqa: S105 (test tokens)
OTHER_TOKEN = "other-tenant-token"  # noqa: S105


@pytest.fixture
def small_stack(transactional_db, tmp_path, monkeypatch):
    """Reviewer (Daphne) with few request slots, and its worker."""
    monkeypatch.setenv("MAX_CONCURRENT_REQUESTS", str(SLOTS))
    monkeypatch.setenv("DECISION_WAITS_PER_AGENT", str(WAITS))
    yield from _running(Stack(tmp_path, with_agent=False))


class OpenWaits:
    """WAITS + 1 pulls of one of the attacker's decisions, each waiting up to 60 s, in a thread of their
    own: the agent's cap is WAITS, so exactly one is refused, and its refusal proves the others open."""

    def __init__(self, url: str, proposal_id: str):
        self.url, self.proposal_id = url, proposal_id
        self.answers: list[httpx.Response] = []  # in the order they came
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._in_thread, daemon=True)

    def _in_thread(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as error:  # shown by the test when it fails
            self.failure = error

    async def _run(self) -> None:
        limits = httpx.Limits(max_connections=WAITS + 10)
        async with httpx.AsyncClient(base_url=self.url, timeout=90, limits=limits) as client:
            headers = {"Authorization": f"Bearer {ATTACKER_TOKEN}"}
            path = f"/api/v1/proposals/{self.proposal_id}/decision?wait=60"

            async def one() -> None:
                self.answers.append(await client.get(path, headers=headers))

            await asyncio.gather(*(one() for _ in range(WAITS + 1)))

    def refused(self) -> httpx.Response | None:
        return next((answer for answer in self.answers if answer.status_code != 200), None)


def test_waits_past_the_request_slots_leave_pages_and_other_tenants_intake_answering(small_stack):
    acme = factories.make_tenant()
    reviewer = factories.make_user("reviewer_a", tenant=acme, groups=["finance"])
    factories.make_policy(
        acme, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 1}]
    )
    attacker = factories.make_agent(acme, "attacker", api_token=ATTACKER_TOKEN, card_url="")  # a pull agent
    proposal = factories.submit(attacker, task_id="task-1")
    globex = factories.make_tenant(slug="globex", name="Globex")
    factories.make_policy(globex, "refunds", tool_pattern="payments.refund", outcome="allow")
    factories.make_agent(globex, "globex-agent", api_token=OTHER_TOKEN, card_url="")

    waits = OpenWaits(small_stack.url, str(proposal.id))
    waits.thread.start()
    api = httpx.Client(base_url=small_stack.url, timeout=10)

    refused = wait_until(
        waits.refused,
        "the wait past the agent's cap refused",
        timeout=60,
        detail=lambda: f"waits: {waits.failure!r}\n{small_stack.logs()}",
    )
    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "5"
    assert refused.json()["error"]["code"] == "too_many_waits"

    # Meanwhile: the sign-in page, a reviewer's queue, another tenant's intake, all answered.
    assert api.get("/accounts/login/").status_code == 200
    queue = signed_in(small_stack.url, reviewer).get("/")
    assert queue.status_code == 200 and str(proposal.id) in queue.text
    request = build_request(
        {"tool": "payments.refund", "arguments": {"order_id": "9", "amount": "5.00", "currency": "EUR"}},
        summary="Refund EUR 5.00",
        principal={"id": "globex-user"},
    )
    intake = api.post(
        "/api/v1/proposals",
        json={"task_id": "globex-task", "context_id": "", "request": request},
        headers={"Authorization": f"Bearer {OTHER_TOKEN}"},
    )
    assert intake.status_code == 201, intake.text
    assert intake.json()["state"] == "allowed" and intake.json()["token"]  # the decision, in the answer
    assert waits.thread.is_alive() and waits.answers == [refused]  # the others are still waiting

    # The reviewer approves one proposal over HTTP: the waits on it answer with its decision.
    voter = signed_in(small_stack.url, reviewer)
    decided = voter.post(
        f"/proposals/{proposal.id}/decide",
        data={
            "csrfmiddlewaretoken": voter.cookies["csrftoken"],
            "action": "approve",
            "digest": proposal.action_digest,
            "otp_code": factories.totp_code(reviewer),
        },
    )
    assert decided.status_code == 302, decided.text[:500]
    waits.thread.join(timeout=90)

    token = Decision.objects.get(proposal=proposal).token
    answered = waits.answers[1:]
    assert [(a.status_code, a.json()["token"]) for a in answered] == [(200, token)] * WAITS
    assert not OutboxMessage.objects.exists()  # pull agents: nothing was ever queued to call them
