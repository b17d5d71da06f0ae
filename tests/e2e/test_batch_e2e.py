"""A batch of 20 refunds on the real server (Daphne and the worker on loopback): the agent asks with
`ReviewerClient.request_approvals`, one reviewer approves all twenty on the batch's page with one
one-time code, and the agent gets twenty verified decisions, each naming the manifest, each consumed
once (a second consume of any is refused), and reports each outcome."""

import re
import threading

import httpx
import pytest

from approvals.models import Batch, Decision, Proposal
from approvals.services.agents import register_agent
from approvals.states import State
from audit.models import AuditEvent, Verb
from reviewer_gate import Approval, NotApproved, ReviewerClient
from tests import factories
from tests.e2e.conftest import Stack, _running
from tests.e2e.test_fanout_redis import signed_in
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

AUDIENCE = "urn:agent:outage-refunds"
API_TOKEN = "outage-refunds-token"  # noqa: S105 (a test token)
MEMBERS = 20


@pytest.fixture
def reviewer_only(transactional_db, tmp_path):
    yield from _running(Stack(tmp_path, with_agent=False))


def refund(order: int) -> dict:
    return {
        "tool": "payments.refund",
        "arguments": {"order_id": str(order), "amount": "25.00", "currency": "EUR"},
        "target": f"order:{order}",
    }


class Asking(threading.Thread):
    """The agent: request_approvals blocks until every member is decided."""

    def __init__(self, client: ReviewerClient):
        super().__init__(daemon=True)
        self.client = client
        self.results: list[Approval | NotApproved] = []
        self.error: Exception | None = None

    def run(self):
        try:
            self.results = self.client.request_approvals(
                [
                    {
                        "action": refund(order),
                        "summary": f"Refund EUR 25.00 to order {order}",
                        "consequences": {"reversible": True},
                    }
                    for order in range(5000, 5000 + MEMBERS)
                ],
                principal={"id": "carol"},
                summary="Refunds for the orders lost in the outage",
                batch_id="outage-refunds",
                timeout=120,
            )
        except Exception as error:  # noqa: BLE001 - the test reports it
            self.error = error


def test_a_batch_of_twenty_refunds_is_approved_on_one_page_with_one_code_and_each_consumed_once(
    reviewer_only,
):
    tenant = factories.make_tenant()
    reviewer = factories.make_user("reviewer_a", tenant=tenant, groups=["finance"], first_name="Alice")
    factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        thresholds=[{"group": "finance", "count": 1}],
        batch={"max_members": 25, "max_total": {"EUR": "600.00"}},
    )
    register_agent(
        tenant=tenant,
        slug="outage-refunds",
        name="Outage refunds",
        card_url="",
        audience=AUDIENCE,
        push_token="unused",  # noqa: S106
        api_token=API_TOKEN,
    )
    client = ReviewerClient(
        reviewer_url=reviewer_only.url,
        api_token=API_TOKEN,
        audience=AUDIENCE,
        tenant=tenant.slug,
        poll_seconds=5,
    )
    agent = Asking(client)
    agent.start()
    wait_until(lambda: Batch.objects.exists(), what="the batch stored", timeout=30)
    batch = Batch.objects.get()

    browser = signed_in(reviewer_only.url, reviewer)
    page = browser.get(f"/batches/{batch.id}/")
    assert page.status_code == 200
    assert page.text.count('id="member-') == MEMBERS
    assert "EUR 500.00" in page.text  # the total
    found = re.search(r'name="manifest" value="(sha256:[0-9a-f]{64})"', page.text)
    assert found is not None, page.text[:3000]
    manifest = found.group(1)
    decided = browser.post(
        f"/batches/{batch.id}/decide",
        data={
            "csrfmiddlewaretoken": browser.cookies["csrftoken"],
            "action": "approve",
            "manifest": manifest,
            "otp_code": factories.totp_code(reviewer),
        },
    )
    assert decided.status_code == 302, decided.text[:3000]

    agent.join(timeout=120)
    assert agent.error is None, agent.error
    assert len(agent.results) == MEMBERS
    assert all(isinstance(result, Approval) for result in agent.results), agent.results
    approvals = [result for result in agent.results if isinstance(result, Approval)]
    assert {approval.decision.manifest for approval in approvals} == {manifest}
    executed = []  # the refunds the agent runs: one per approved member, each with its own key
    for result in approvals:
        executed.append((result.action["arguments"]["order_id"], result.idempotency_key))
        result.report("succeeded", transaction_id=f"tx-{result.decision.request_id}")
    assert len(executed) == MEMBERS
    assert len({order for order, _ in executed}) == len({key for _, key in executed}) == MEMBERS

    assert AuditEvent.objects.filter(verb=Verb.DECISION_CONSUMED).count() == MEMBERS
    assert AuditEvent.objects.filter(verb=Verb.STEP_UP_FAILED).count() == 0
    assert set(Proposal.objects.values_list("state", flat=True)) == {State.SUCCEEDED}
    one = Decision.objects.first()
    assert one is not None
    again = httpx.post(
        f"{reviewer_only.url}/api/v1/decisions/{one.jti}/consume",
        json={"rev": one.rev},
        headers={"Authorization": f"Bearer {API_TOKEN}"},
    )
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "consumed"
    client.close()
