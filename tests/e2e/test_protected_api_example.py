"""examples/protected_api: the refund API and the agent of docs/protect-an-api.md's walk-through, run as
written against a real Reviewer (Daphne, its worker, this test's database): the agent's plain call is
refused and refunds nothing; through TransactionAuthorization the refund people approved runs once. The
same for the TypeScript agent, examples/js/protected-refund.js (`transactionAuthorizedFetch`), run by
`node` when examples/js is installed (`make js-examples`)."""

import os
import subprocess
import threading
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from approvals.models import Proposal
from approvals.states import State
from examples.protected_api import agent as example_agent
from examples.protected_api.refund_api import build_app
from oauth.services import register_resource
from reviewer_gate.resource import ResourceKey
from reviewer_gate.tac import TransactionAuthorization
from tests import factories
from tests.e2e.test_gate_holds import approve
from tests.e2e.test_js_examples import EXAMPLES, INSTALLED, NODE
from tests.e2e.test_protected_api import make_world
from tests.reviewer_processes import listening_socket, url_of
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DEADLINE_SECONDS = 30
BOT_TOKEN = "example-bot-token"


@dataclass
class RefundAPI:
    url: str
    ledger: list[dict[str, str]]
    people: dict


@pytest.fixture
def refund_api(reviewer_stack, tmp_path):
    """The example's refund API under uvicorn on loopback, registered as a protected resource of a
    payments team whose refunds over EUR 10 need two finance people; the agent `refund-bot`."""
    import uvicorn

    listener = listening_socket()
    audience = url_of(listener)
    tenant, people = make_world(audience)
    key = ResourceKey.from_file(tmp_path / "refund-api-key.pem", create=True)
    register_resource(
        tenant=tenant,
        slug="refund-api",
        name="Refund API",
        audience=audience,
        jwks=key.jwks(),
        types={"refund": "payments.refund"},
        api_token="refund-api-token",
    )
    factories.make_agent(tenant, "refund-bot", card_url="", api_token=BOT_TOKEN, push_token="bot-push")
    ledger: list[dict[str, str]] = []
    app, guard = build_app(
        audience=audience,
        reviewer_url=reviewer_stack.url,
        api_token="refund-api-token",
        key=key,
        callers={"carol-key": "carol"},
        ledger=ledger,
    )
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, "the refund API's start", timeout=DEADLINE_SECONDS)
        yield RefundAPI(audience, ledger, people)
    finally:
        server.should_exit = True
        thread.join(timeout=DEADLINE_SECONDS)
        listener.close()
        guard.close()


def approve_when_filed(reviewer_stack, api: RefundAPI) -> None:
    proposal = wait_until(
        lambda: Proposal.objects.filter(state=State.AWAITING_REVIEW).first(),
        "the proposal the relayed challenge filed",
        timeout=DEADLINE_SECONDS,
    )
    assert proposal.principal_id == "carol" and proposal.tool == "payments.refund"
    approve(reviewer_stack, api.people["reviewer_a"], proposal)
    approve(reviewer_stack, api.people["reviewer_b"], proposal)


def test_the_example_agent_gets_only_the_approved_refund_run_once(reviewer_stack, refund_api):
    plain = example_agent.refund(refund_api.url, "1182", "740.00", auth=None, api_key="carol-key")
    assert plain.status_code == 401 and refund_api.ledger == []  # the agent cannot skip the decision

    auth = TransactionAuthorization(
        reviewer_stack.url, client_id="refund-bot", client_secret=BOT_TOKEN, max_wait=90
    )
    outcome: dict[str, Any] = {}
    calling = threading.Thread(
        target=lambda: outcome.update(
            answer=example_agent.refund(refund_api.url, "1182", "740.00", auth=auth, api_key="carol-key")
        )
    )
    calling.start()
    approve_when_filed(reviewer_stack, refund_api)
    calling.join(timeout=120)

    answer = outcome.get("answer")
    assert isinstance(answer, httpx.Response) and answer.status_code == 200, outcome
    assert refund_api.ledger == [{"order_id": "1182", "amount": "740.00", "currency": "EUR"}]


@pytest.mark.skipif(not NODE, reason="the JavaScript examples need Node 20 or newer (node not found)")
@pytest.mark.skipif(not INSTALLED.exists(), reason="examples/js is not installed: `make js-examples`")
def test_the_typescript_agent_gets_only_the_approved_refund_run_once(reviewer_stack, refund_api):
    agent = subprocess.Popen(
        [
            NODE,
            "protected-refund.js",
            "--api-url",
            refund_api.url,
            "--reviewer-url",
            reviewer_stack.url,
            "--client-id",
            "refund-bot",
        ],
        cwd=EXAMPLES,
        env={**os.environ, "REVIEWER_API_TOKEN": BOT_TOKEN},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        approve_when_filed(reviewer_stack, refund_api)
        output, _ = agent.communicate(timeout=120)
    finally:
        agent.kill()

    assert agent.returncode == 0, output
    assert output.startswith("200"), output
    assert refund_api.ledger == [{"order_id": "1182", "amount": "740.00", "currency": "EUR"}]
