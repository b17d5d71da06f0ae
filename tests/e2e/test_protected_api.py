"""A refund API that requires Reviewer's decision itself, whoever calls it: the same FastAPI service once
protected by `ReviewerGateMiddleware`, once unchanged behind `python -m reviewer_gate.proxy`, in front
of a real Reviewer (Daphne, its worker, this test's database) over HTTP on loopback.

Each door refuses a direct call, runs the call once two people approved it, and refuses a replay, a
changed amount and a decision token Reviewer minted for another resource, on both paths:

- a caller that speaks no TAC (the 202 mode): the resource files the proposal itself, the same request
  sent again after the approvals runs; a changed amount is a new request, pending again;
- an agent that speaks TAC (`reviewer_gate.tac.TransactionAuthorization` against Reviewer's TAC
  endpoint): the challenge relayed, the token verified, matched and consumed. Skipped where Reviewer's
  TAC endpoint is absent; the same checks run against a stand-in for Reviewer in
  sdk/python/tests/test_resource.py and test_proxy.py.

Nothing is mocked. Waits poll a condition with a deadline."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request

from approvals.models import Proposal
from approvals.states import State
from reviewer_gate.resource import (
    ProtectedRequest,
    ResourceGuard,
    ResourceKey,
    ReviewerGateMiddleware,
    Route,
    api_key_caller,
    authorization_detail,
)
from tests import factories
from tests.e2e.test_gate_holds import approve
from tests.examples.harness import CHECKOUT_PYTHONPATH
from tests.reviewer_processes import ServerProcess, answers, listening_socket, url_of
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DEADLINE_SECONDS = 30
CAROL_KEY = "key-of-carol"
CAROL = {"X-Api-Key": CAROL_KEY}
REFUND = {"amount": "40.00", "currency": "EUR"}


# --- the API owner's service ---------------------------------------------------------------------------


class Ledger:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.refunds: list[dict[str, Any]] = []

    def count(self) -> int:
        with self.lock:
            return len(self.refunds)


def refund_service(ledger: Ledger) -> FastAPI:
    """The refund API as its owner wrote it: it refunds whatever reaches it."""
    app = FastAPI()

    @app.post("/refunds/{order_id}")
    async def refund(order_id: str, request: Request) -> dict[str, str]:
        body = await request.json()
        with ledger.lock:
            ledger.refunds.append({"order_id": order_id, **body})
        return {"refunded": body["amount"], "order_id": order_id}

    return app


def describe_refund(audience: str):
    def describe(request: ProtectedRequest) -> dict[str, Any]:
        body = request.json_object()
        return authorization_detail(
            "refund",
            target=f"{audience}/orders/{request.path_params['order_id']}",
            amount=body["amount"],
            currency=body["currency"],
            order_id=request.path_params["order_id"],
        )

    return describe


@contextmanager
def served(app: Any) -> Iterator[str]:
    """An ASGI app under uvicorn in a thread, on a socket listening before it starts; yields its URL."""
    listener = listening_socket()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, "uvicorn's start", timeout=DEADLINE_SECONDS)
        yield url_of(listener)
    finally:
        server.should_exit = True
        thread.join(timeout=DEADLINE_SECONDS)
        listener.close()


# --- the two doors -----------------------------------------------------------------------------------


@contextmanager
def middleware_door(reviewer_url: str, api_token: str, ledger: Ledger, key: ResourceKey) -> Iterator[str]:
    listener = listening_socket()
    audience = url_of(listener)
    guard = ResourceGuard(
        routes=[Route("POST", "/refunds/{order_id}", describe_refund(audience), tool="payments.refund")],
        audience=audience,
        reviewer_url=reviewer_url,
        api_token=api_token,
        key=key,
        caller=api_key_caller("X-Api-Key", {CAROL_KEY: "carol"}),
        intake=True,
        retry_after_seconds=1,
    )
    app = refund_service(ledger)
    app.add_middleware(ReviewerGateMiddleware, guard=guard)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, "the protected service's start", timeout=DEADLINE_SECONDS)
        yield audience
    finally:
        server.should_exit = True
        thread.join(timeout=DEADLINE_SECONDS)
        listener.close()
        guard.close()


ROUTES_TOML = """
[resource]
audience = "{audience}"
key_file = "resource-key.pem"
intake = true
retry_after_seconds = 1

[reviewer]
url = "{reviewer}"

[caller]
header = "X-Api-Key"
keys = {{ "{key}" = "carol" }}

[[route]]
method = "POST"
path = "/refunds/{{order_id}}"
type = "refund"
tool = "payments.refund"
target = "{audience}/orders/{{order_id}}"
fields = {{ order_id = "path.order_id", amount = "body.amount", currency = "body.currency" }}
"""


@contextmanager
def proxy_door(reviewer_url: str, api_token: str, ledger: Ledger, folder: Path) -> Iterator[str]:
    """The unchanged service on its own port, and the proxy (a subprocess, the real command) in front;
    its key is `folder`/resource-key.pem."""
    with served(refund_service(ledger)) as upstream:
        listener = listening_socket()
        audience = url_of(listener)
        routes = folder / "routes.toml"
        routes.write_text(ROUTES_TOML.format(audience=audience, reviewer=reviewer_url, key=CAROL_KEY))
        proxy = ServerProcess(
            "proxy",
            [
                sys.executable,
                "-m",
                "reviewer_gate.proxy",
                "--upstream",
                upstream,
                "--routes",
                str(routes),
                "--fd",
                str(listener.fileno()),
            ],
            env={
                "PYTHONPATH": CHECKOUT_PYTHONPATH,
                "PATH": "/usr/bin:/bin",
                "REVIEWER_GATE_API_TOKEN": api_token,
            },
            log_dir=folder,
            pass_fds=(listener.fileno(),),
        )
        proxy.start()
        try:
            proxy.wait_until(lambda: answers(f"{audience}/.well-known/oauth-protected-resource"), "the proxy")
            yield audience
        finally:
            proxy.stop()
            listener.close()
            sys.stdout.write(proxy.log())  # shown by pytest only for a failing test


# --- the world -----------------------------------------------------------------------------------------


def make_world(audience: str):
    """A payments team: refunds up to EUR 10 are allowed by policy; above, two finance people approve.
    Another protected resource of the same tenant, for the token minted for someone else."""
    tenant = factories.make_tenant()
    people = {
        name: factories.make_user(name, tenant=tenant, groups=["finance"])
        for name in ("reviewer_a", "reviewer_b")
    }
    factories.make_user("carol", tenant=tenant, principal_id="carol")
    factories.make_policy(
        tenant,
        "small-refunds",
        outcome="allow",
        tool_pattern="payments.refund",
        condition="double(args.amount) <= 10.0",
    )
    factories.make_policy(
        tenant,
        "refunds-two-people",
        tool_pattern="payments.refund",
        condition="double(args.amount) > 10.0",
        thresholds=[{"group": "finance", "count": 2}],
    )
    factories.make_agent(
        tenant, "other-api", card_url="", audience="https://other-api.example", api_token="other-api-token"
    )
    return tenant, people


def register_pull_resource(tenant, audience: str) -> None:
    """The resource as a registered pull agent whose audience is its URL (all the 202 mode needs)."""
    factories.make_agent(tenant, "refund-api", card_url="", audience=audience, api_token="refund-api-token")


def token_for_another_resource(reviewer_url: str) -> str:
    """A real decision Reviewer signed for the other resource (policy allowed it at intake)."""
    from reviewer_gate import build_request

    request = build_request(
        {"tool": "payments.refund", "arguments": {"order_id": "1182", "amount": "5.00", "currency": "EUR"}},
        summary="a small refund at the other API",
        principal={"id": "carol"},
    )
    answer = httpx.post(
        f"{reviewer_url}/api/v1/proposals",
        json={"task_id": "other-task", "context_id": "", "request": request},
        headers={"Authorization": "Bearer other-api-token", "Prefer": "decision-in-answer"},
        timeout=DEADLINE_SECONDS,
    )
    assert answer.status_code == 201, answer.text
    assert answer.json()["state"] == State.ALLOWED
    return answer.json()["token"]


def proposal_for(request_id: str) -> Proposal:
    return wait_until(
        lambda: Proposal.objects.filter(task_id=request_id).first(),
        f"the proposal of {request_id}",
        timeout=DEADLINE_SECONDS,
    )


@pytest.fixture(params=["middleware", "proxy"])
def door(request, reviewer_stack, tmp_path):
    """(the protected API's URL, its ledger, its key, the stack) for one door, not yet registered."""
    ledger = Ledger()
    key = ResourceKey.from_file(tmp_path / "resource-key.pem", create=True)  # the proxy reads this file
    if request.param == "middleware":
        opened = middleware_door(reviewer_stack.url, "refund-api-token", ledger, key)
    else:
        opened = proxy_door(reviewer_stack.url, "refund-api-token", ledger, tmp_path)
    # The registration's audience is the door's URL, known once it is open; Reviewer reads the
    # registration on each call, so registering now is the same as before.
    with opened as url:
        yield url, ledger, key, reviewer_stack


def test_a_protected_refund_runs_once_after_two_people_approve_and_nothing_else_gets_through(door):
    url, ledger, _key, stack = door
    tenant, people = make_world(url)
    register_pull_resource(tenant, url)
    api = httpx.Client(base_url=url, timeout=DEADLINE_SECONDS)

    # A direct call: the resource files the proposal itself and answers 202; nothing ran.
    pending = api.post("/refunds/1182", json=REFUND, headers=CAROL)
    assert pending.status_code == 202, pending.text
    assert pending.headers["retry-after"] == "1"
    assert ledger.count() == 0
    request_id = pending.json()["request_id"]
    proposal = proposal_for(request_id)
    assert proposal.state == State.AWAITING_REVIEW
    assert proposal.action["arguments"] == {"order_id": "1182", "amount": "40.00", "currency": "EUR"}
    status = api.get(pending.json()["status_url"])
    assert status.json() == {"proposal_id": str(proposal.id), "state": "awaiting_review"}

    # One approval is not enough: the same request is still pending.
    approve(stack, people["reviewer_a"], proposal)
    assert api.post("/refunds/1182", json=REFUND, headers=CAROL).status_code == 202
    assert ledger.count() == 0

    # The second approval releases it: the same request, sent again, runs once.
    approve(stack, people["reviewer_b"], proposal)
    ran = api.post("/refunds/1182", json=REFUND, headers=CAROL)
    assert ran.status_code == 200, ran.text
    assert ran.json() == {"refunded": "40.00", "order_id": "1182"}
    assert ledger.refunds == [{"order_id": "1182", **REFUND}]
    wait_until(
        lambda: Proposal.objects.get(pk=proposal.pk).state == State.SUCCEEDED,
        "the outcome reported to Reviewer",
        timeout=DEADLINE_SECONDS,
    )

    # A replay of the approved request: refused, nothing runs again.
    replay = api.post("/refunds/1182", json=REFUND, headers=CAROL)
    assert replay.status_code == 409
    assert replay.json()["error"] == "already_executed"

    # A changed amount is another request: pending again, nothing runs.
    changed = api.post("/refunds/1182", json={"amount": "4000.00", "currency": "EUR"}, headers=CAROL)
    assert changed.status_code == 202
    assert changed.json()["request_id"] != request_id

    # A decision Reviewer minted for another resource: refused as such.
    stolen = api.post(
        "/refunds/1182",
        json={"amount": "5.00", "currency": "EUR"},
        headers={**CAROL, "Authorization": f"Bearer {token_for_another_resource(stack.url)}"},
    )
    assert stolen.status_code == 401
    assert stolen.json()["reviewer_gate_code"] == "wrong_audience"

    # A direct call from nobody the resource knows files nothing.
    assert api.post("/refunds/1182", json=REFUND).status_code == 401

    assert ledger.refunds == [{"order_id": "1182", **REFUND}]
    api.close()


def test_a_caller_that_speaks_tac_gets_a_challenge_signed_by_the_resource(door):
    url, ledger, _key, _stack = door
    tenant, _people = make_world(url)
    register_pull_resource(tenant, url)

    response = httpx.post(
        f"{url}/refunds/1182", json=REFUND, headers={**CAROL, "Accept-Txn-Challenge": "?1"}, timeout=30
    )

    assert response.status_code == 401
    assert 'error="transaction_authorization_required"' in response.headers["www-authenticate"]
    assert "transaction_challenge=" in response.headers["www-authenticate"]
    assert ledger.count() == 0
    assert not Proposal.objects.exists()


# --- the TAC door: an agent that speaks it ------------------------------------------------------------

BOT_TOKEN = "refund-bot-token"


@pytest.fixture
def tac():
    """Reviewer's TAC client and endpoint (reviewer_gate.tac, the oauth app), skipped where absent;
    asked for before `door`, so that nothing starts for nothing."""
    pytest.importorskip("oauth.services", reason="Reviewer's TAC endpoint")
    return pytest.importorskip("reviewer_gate.tac", reason="Reviewer's TAC client")


def test_an_agent_speaking_tac_gets_its_refund_run_once_after_two_people_approve(tac, door):
    """The agent calls through `reviewer_gate.tac.TransactionAuthorization` (Reviewer as the TAC
    authorization server): the resource challenges, the agent relays the challenge to Reviewer, two
    people approve, the agent retries with Reviewer's token and the refund runs once; the same token
    replayed, on a changed amount, and a token minted for another resource are refused."""
    from oauth.services import register_resource

    url, ledger, key, stack = door
    tenant, people = make_world(url)
    register_resource(
        tenant=tenant,
        slug="refund-api",
        name="Refund API",
        audience=url,
        jwks=key.jwks(),
        types={"refund": "payments.refund"},
        api_token="refund-api-token",
    )
    factories.make_agent(tenant, "refund-bot", card_url="", api_token=BOT_TOKEN, push_token="bot-push")

    direct = httpx.post(
        f"{url}/refunds/1182", json=REFUND, headers={**CAROL, "Accept-Txn-Challenge": "?1"}, timeout=30
    )
    assert direct.status_code == 401 and ledger.count() == 0

    outcome: dict[str, Any] = {}
    auth = tac.TransactionAuthorization(
        stack.url, client_id="refund-bot", client_secret=BOT_TOKEN, max_wait=90
    )

    def agent_calls() -> None:
        try:
            outcome["response"] = httpx.post(
                f"{url}/refunds/1182", json=REFUND, headers=CAROL, auth=auth, timeout=120
            )
        except tac.TransactionAuthorizationError as error:
            outcome["error"] = error

    agent = threading.Thread(target=agent_calls)
    agent.start()
    proposal = wait_until(
        lambda: Proposal.objects.filter(state=State.AWAITING_REVIEW).first(),
        "the proposal the relayed challenge filed",
        timeout=DEADLINE_SECONDS,
    )
    assert proposal.action["arguments"] == {
        "type": "refund",
        "locations": [f"{url}/orders/1182"],
        "amount": "40.00",
        "currency": "EUR",
        "order_id": "1182",
    }
    approve(stack, people["reviewer_a"], proposal)
    approve(stack, people["reviewer_b"], proposal)
    agent.join(timeout=120)

    response = outcome.get("response")
    assert response is not None, outcome
    assert response.status_code == 200, response.text
    assert ledger.refunds == [{"order_id": "1182", **REFUND}]
    wait_until(
        lambda: Proposal.objects.get(pk=proposal.pk).state == State.SUCCEEDED,
        "the outcome reported to Reviewer",
        timeout=DEADLINE_SECONDS,
    )
    token = response.request.headers["Authorization"].removeprefix("Bearer ")
    with_token = {**CAROL, "Authorization": f"Bearer {token}"}

    replay = httpx.post(f"{url}/refunds/1182", json=REFUND, headers=with_token, timeout=30)
    changed = httpx.post(
        f"{url}/refunds/1182", json={"amount": "4000.00", "currency": "EUR"}, headers=with_token, timeout=30
    )
    stolen = httpx.post(
        f"{url}/refunds/1182",
        json={"amount": "5.00", "currency": "EUR"},
        headers={**CAROL, "Authorization": f"Bearer {token_for_another_resource(stack.url)}"},
        timeout=30,
    )

    assert (replay.status_code, replay.json()["reviewer_gate_code"]) == (401, "replayed")
    assert (changed.status_code, changed.json()["reviewer_gate_code"]) == (403, "wrong_operation")
    assert (stolen.status_code, stolen.json()["reviewer_gate_code"]) == (401, "wrong_audience")
    assert ledger.refunds == [{"order_id": "1182", **REFUND}]
