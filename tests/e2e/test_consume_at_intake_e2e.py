"""An allowed call in two requests on the real server (Daphne and the worker on loopback): a pull agent
asks with `ReviewerClient.request_approval`, which sends `Prefer: consume`; policy allows, Reviewer
consumes the approval in the intake request, the client verifies the token and acts without a consume
request, then reports the outcome. The consume call afterwards is refused as for any consumed decision,
and a replay of the intake hands out nothing new."""

import httpx
import pytest

from approvals.models import Decision, Proposal
from approvals.services.agents import register_agent
from approvals.states import State
from audit.models import AuditEvent, Verb
from reviewer_gate import ReviewerClient, build_request
from tests import factories
from tests.e2e.conftest import Stack, _running

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

AUDIENCE = "urn:agent:small-refunds"
API_TOKEN = "small-refunds-token"  # noqa: S105 (a test token)
ACTION = {"tool": "payments.refund", "arguments": {"order_id": "1182", "amount": "5.00", "currency": "EUR"}}


@pytest.fixture
def reviewer_only(transactional_db, tmp_path):
    yield from _running(Stack(tmp_path, with_agent=False))


@pytest.fixture
def client(reviewer_only):
    tenant = factories.make_tenant()
    factories.make_policy(tenant, "small-refunds", tool_pattern="payments.refund", outcome="allow")
    register_agent(
        tenant=tenant,
        slug="small-refunds",
        name="Small refunds",
        card_url="",
        audience=AUDIENCE,
        push_token="unused",  # noqa: S106
        api_token=API_TOKEN,
    )
    client = ReviewerClient(
        reviewer_url=reviewer_only.url, api_token=API_TOKEN, audience=AUDIENCE, tenant=tenant.slug
    )
    yield client
    client.close()


def requests_made(stack: Stack) -> list[str]:
    """The agent API requests in Daphne's access log, in order ("POST /api/v1/proposals", ...)."""
    lines = stack.access_log.read_text().splitlines()
    return [
        " ".join(part for part in line.split('"')[1].split()[:2])
        for line in lines
        if '"' in line and "/api/v1/" in line
    ]


def test_an_allowed_call_is_submit_and_outcome_with_the_consume_done_at_intake(reviewer_only, client):
    reviewer_only.access_log.write_text("")

    approval = client.request_approval(ACTION, summary="Refund EUR 5.00", principal={"id": "carol"})
    proposal = Proposal.objects.get()
    assert approval.submission.consumed and proposal.state == State.EXECUTING
    assert Decision.objects.get().consumed_at is not None
    assert approval.report("succeeded", transaction_id="tx-1182")

    assert Proposal.objects.get().state == State.SUCCEEDED
    paths = requests_made(reviewer_only)
    assert [path.split(" ")[0] for path in paths] == ["POST", "POST"], paths
    assert paths[0] == "POST /api/v1/proposals" and paths[1].endswith("/outcome"), paths
    (consumed,) = AuditEvent.objects.filter(verb=Verb.DECISION_CONSUMED)
    assert consumed.data["via"] == "intake"


def test_the_consume_call_and_a_replay_release_nothing_more(reviewer_only, client):
    request = build_request(ACTION, summary="Refund EUR 5.00", principal={"id": "carol"})
    first = client.submit(request, task_id="task-1182", consume=True)
    assert first.consumed and first.state == "executing"
    decision = Decision.objects.get()

    consumed_again = httpx.post(
        f"{reviewer_only.url}/api/v1/decisions/{decision.jti}/consume",
        json={"rev": decision.rev},
        headers={"Authorization": f"Bearer {API_TOKEN}"},
    )
    again = client.submit(request, task_id="task-1182", consume=True)

    assert consumed_again.status_code == 409 and consumed_again.json()["error"]["code"] == "consumed"
    assert again.token == first.token and again.state == "executing" and not again.consumed
    assert AuditEvent.objects.filter(verb=Verb.DECISION_CONSUMED).count() == 1
