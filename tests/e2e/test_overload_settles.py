"""Overload degrades, never fails, on the real server: Daphne with its agents' overload limit
set low (AGENT_CONCURRENCY_LIMIT=2), its worker, PostgreSQL, and agents in real threads.

A burst of intake far past the limit: every answer is 201 (accepted) or 503 with Retry-After (refused);
a refused request wrote nothing, so sending it again is safe. Then every accepted proposal settles in
exactly one terminal state: the agents verify, consume and report their outcome concurrently, through
reviewer-gate, whose consume and outcome retry the 503s the limit answers meanwhile."""

import threading

import httpx
import pytest

from approvals.models import Decision, Proposal
from approvals.services.agents import register_agent
from approvals.states import State
from reviewer_gate import ReviewerClient, build_request
from reviewer_gate.client import Submission
from tests import factories
from tests.concurrency import requires_postgres
from tests.e2e.conftest import Stack, _running

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), requires_postgres]

AUDIENCE = "urn:agent:overload"
API_TOKEN = "overload-agent-token"  # noqa: S105 (a test token)
BURST = 40


@pytest.fixture
def limited_stack(transactional_db, tmp_path, monkeypatch):
    """Reviewer (Daphne) and its worker, answering at most two agents' HTTP requests at once."""
    monkeypatch.setenv("AGENT_CONCURRENCY_LIMIT", "2")
    yield from _running(Stack(tmp_path, with_agent=False))


def together(calls):
    """Run every call in its own thread, released at once by a barrier; their results in order."""
    barrier = threading.Barrier(len(calls))
    results = [None] * len(calls)

    def run(index, call):
        barrier.wait(timeout=30)
        results[index] = call()

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def test_past_the_limit_intake_is_refused_cleanly_and_every_accepted_proposal_settles(limited_stack):
    tenant = factories.make_tenant()
    factories.make_user("requester", tenant=tenant, principal_id="requester")
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund", outcome="allow")
    # A pull agent (no card URL): Reviewer never calls it; it reads its decisions by pull.
    register_agent(
        tenant=tenant,
        slug="overload-agent",
        name="Overload agent",
        card_url="",
        audience=AUDIENCE,
        push_token="unused",  # noqa: S106
        api_token=API_TOKEN,
    )
    requests = [
        build_request(
            {"tool": "payments.refund", "arguments": {"order": str(n), "amount": "10.00", "currency": "EUR"}},
            summary=f"Refund order {n}",
            principal={"id": "requester", "display": "Rita Requester"},
        )
        for n in range(BURST)
    ]

    def submit(n):
        # One attempt each, no retry: the answer the server gave under the burst.
        return httpx.post(
            f"{limited_stack.url}/api/v1/proposals",
            json={"task_id": f"task-{n}", "context_id": "", "request": requests[n]},
            headers={"Authorization": f"Bearer {API_TOKEN}"},
            timeout=60,
        )

    answers = together([lambda n=n: submit(n) for n in range(BURST)])

    statuses = {answer.status_code for answer in answers}
    accepted = [n for n, answer in enumerate(answers) if answer.status_code == 201]
    refused = [n for n, answer in enumerate(answers) if answer.status_code == 503]
    assert statuses <= {201, 503}, [a.text[:200] for a in answers if a.status_code not in (201, 503)]
    assert accepted and refused  # the burst went past the limit, and the limit still let work through
    for n in refused:
        assert answers[n].headers["Retry-After"] == "1"
        assert answers[n].json()["error"]["code"] == "overloaded"
    # A refused request wrote nothing; every accepted one is exactly one proposal.
    assert sorted(Proposal.objects.values_list("task_id", flat=True)) == sorted(f"task-{n}" for n in accepted)

    client = ReviewerClient(reviewer_url=limited_stack.url, api_token=API_TOKEN, audience=AUDIENCE)

    def settle(n):
        receipt = answers[n].json()
        submission = Submission(f"task-{n}", "", requests[n], receipt["proposal_id"], receipt["state"])
        approval = client.release(submission, client.wait_for_token(submission, timeout=60))
        return approval.report("succeeded", transaction_id=f"tx-{n}")

    # Agents settling at once also run into the limit; reviewer-gate's consume and outcome wait it out.
    assert together([lambda n=n: settle(n) for n in accepted]) == [True] * len(accepted)

    settled = Proposal.objects.filter(task_id__in=[f"task-{n}" for n in accepted])
    assert sorted(settled.values_list("state", flat=True)) == [State.SUCCEEDED] * len(accepted)
    assert Decision.objects.filter(proposal__in=settled, consumed_at__isnull=False).count() == len(accepted)
