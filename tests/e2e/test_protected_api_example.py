"""examples/protected_api: the refund API and the agent of docs/protect-an-api.md's walk-through, run as
written against a real Reviewer (Daphne, its worker, this test's database): the agent's plain call is
refused and refunds nothing; through TransactionAuthorization the refund people approved runs once."""

import threading
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
from tests.e2e.test_protected_api import make_world
from tests.reviewer_processes import listening_socket, url_of
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DEADLINE_SECONDS = 30
BOT_TOKEN = "example-bot-token"


def test_the_example_agent_gets_only_the_approved_refund_run_once(reviewer_stack, tmp_path):
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

        plain = example_agent.refund(audience, "1182", "740.00", auth=None, api_key="carol-key")
        assert plain.status_code == 401 and ledger == []  # the agent cannot skip the decision

        auth = TransactionAuthorization(
            reviewer_stack.url, client_id="refund-bot", client_secret=BOT_TOKEN, max_wait=90
        )
        outcome: dict[str, Any] = {}
        calling = threading.Thread(
            target=lambda: outcome.update(
                answer=example_agent.refund(audience, "1182", "740.00", auth=auth, api_key="carol-key")
            )
        )
        calling.start()
        proposal = wait_until(
            lambda: Proposal.objects.filter(state=State.AWAITING_REVIEW).first(),
            "the proposal the relayed challenge filed",
            timeout=DEADLINE_SECONDS,
        )
        assert proposal.principal_id == "carol" and proposal.tool == "payments.refund"
        approve(reviewer_stack, people["reviewer_a"], proposal)
        approve(reviewer_stack, people["reviewer_b"], proposal)
        calling.join(timeout=120)

        answer = outcome.get("answer")
        assert isinstance(answer, httpx.Response) and answer.status_code == 200, outcome
        assert ledger == [{"order_id": "1182", "amount": "740.00", "currency": "EUR"}]
    finally:
        server.should_exit = True
        thread.join(timeout=DEADLINE_SECONDS)
        listener.close()
        guard.close()
