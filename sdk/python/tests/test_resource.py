"""The resource's side: a FastAPI refund service behind ReviewerGateMiddleware (and a WSGI app behind its
twin) refuses a direct call with a signed transaction challenge, runs an approved call once, and refuses
a replay, a changed amount, another route, another caller and a token for another resource.

`FakeReviewer` stands in for Reviewer here: it serves the JWKS, records every consume and outcome, and
its answers to consume can be set (revoked, consumed). The decision tokens are minted as Reviewer's TAC
endpoint will mint them (`reviewer_gate.testing.grant_challenge`); the same service against a real
Reviewer is tests/e2e/test_protected_api.py."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import jwt
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from reviewer_gate.decision import GateError, check_transaction
from reviewer_gate.resource import (
    CHALLENGE_TYPE,
    ProtectedRequest,
    ResourceGuard,
    ResourceKey,
    ReviewerGateMiddleware,
    ReviewerGateWSGIMiddleware,
    Route,
    api_key_caller,
    authorization_detail,
)
from reviewer_gate.testing import decide_at_intake, grant_challenge

AUDIENCE = "https://payments.example"
CAROL = {"X-Api-Key": "key-of-carol"}
DAVE = {"X-Api-Key": "key-of-dave"}
TAC = {"Accept-Txn-Challenge": "?1"}


def describe_refund(request: ProtectedRequest) -> dict[str, Any]:
    body = request.json_object()
    return authorization_detail(
        "refund",
        target=f"{AUDIENCE}/orders/{request.path_params['order_id']}",
        amount=body["amount"],
        currency=body["currency"],
        order_id=request.path_params["order_id"],
    )


def describe_payout(request: ProtectedRequest) -> dict[str, Any]:
    body = request.json_object()
    return authorization_detail(
        "refund",  # the same description as a refund: only the route tells them apart
        target=f"{AUDIENCE}/orders/{request.path_params['order_id']}",
        amount=body["amount"],
        currency=body["currency"],
        order_id=request.path_params["order_id"],
    )


ROUTES = [
    Route("POST", "/refunds/{order_id}", describe_refund, tool="payments.refund"),
    Route("POST", "/payouts/{order_id}", describe_payout, tool="payments.payout"),
]


class Ledger:
    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []


def refund_service(ledger: Ledger, *, status: int = 200) -> FastAPI:
    """The API owner's service, unchanged: it knows nothing about Reviewer except the decision it may read."""
    app = FastAPI()

    @app.post("/refunds/{order_id}")
    async def refund(order_id: str, request: Request) -> JSONResponse:
        body = await request.json()
        decision = getattr(request.state, "reviewer_decision", None)
        ledger.runs.append({"order_id": order_id, **body, "jti": decision.jti if decision else None})
        return JSONResponse({"refunded": body["amount"]}, status_code=status)

    @app.post("/payouts/{order_id}")
    async def payout(order_id: str) -> dict[str, str]:
        ledger.runs.append({"payout": order_id})
        return {"paid": order_id}

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"ok": "yes"}

    return app


@pytest.fixture
def resource_key() -> ResourceKey:
    return ResourceKey.generate()


def make_guard(reviewer, resource_key, **options) -> ResourceGuard:
    return ResourceGuard(
        routes=ROUTES,
        audience=AUDIENCE,
        reviewer_url=reviewer.url,
        api_token="resource-api-token",
        key=resource_key,
        caller=api_key_caller("X-Api-Key", {"key-of-carol": "carol", "key-of-dave": "dave"}),
        **options,
    )


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture
def guard(reviewer, resource_key):
    guard = make_guard(reviewer, resource_key)
    yield guard
    guard.close()


# httpx's sync client cannot drive an ASGI app: run the calls through an async client per request.
@pytest.fixture
def call(guard, ledger):
    app = refund_service(ledger)
    app.add_middleware(ReviewerGateMiddleware, guard=guard)

    async def send(method: str, path: str, **kwargs: Any) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=AUDIENCE) as client:
            return await client.request(method, path, **kwargs)

    return send


REFUND = {"amount": "40.00", "currency": "EUR"}


def challenge_of(response: httpx.Response) -> str:
    header = response.headers["www-authenticate"]
    assert header.startswith("Bearer ")
    assert 'error="transaction_authorization_required"' in header
    match = re.search(r'transaction_challenge="([^"]+)"', header)
    assert match, header
    return match.group(1)


def bearer(token: str, caller: dict[str, str] = CAROL) -> dict[str, str]:
    return {**caller, "Authorization": f"Bearer {token}"}


async def approved_token(
    call, reviewer, key, *, caller=CAROL, body=REFUND, path="/refunds/1182", **overrides
) -> str:
    challenged = await call("POST", path, json=body, headers={**caller, **TAC})
    assert challenged.status_code == 401
    return grant_challenge(reviewer, key, challenge_of(challenged), **overrides)


# --- the challenge -----------------------------------------------------------------------------------


async def test_a_direct_call_is_answered_with_a_challenge_signed_by_the_resource_and_nothing_runs(
    call, ledger, resource_key, reviewer
):
    response = await call("POST", "/refunds/1182", json=REFUND, headers=CAROL)

    assert response.status_code == 401
    assert ledger.runs == []
    challenge = challenge_of(response)
    assert jwt.get_unverified_header(challenge)["typ"] == CHALLENGE_TYPE
    jwks = (await call("GET", "/.well-known/txn-challenge-jwks.json")).json()
    public = jwt.PyJWK(jwks["keys"][0]).key
    claims = jwt.decode(challenge, public, algorithms=["EdDSA"], audience=reviewer.url, issuer=AUDIENCE)
    assert set(claims) >= {"iss", "aud", "iat", "exp", "jti", "txn", "authorization_details", "reason", "act"}
    assert claims["act"] == {"sub": "carol"}
    assert claims["authorization_details"] == [
        {
            "type": "refund",
            "locations": [f"{AUDIENCE}/orders/1182"],
            "amount": "40.00",
            "currency": "EUR",
            "order_id": "1182",
        }
    ]
    assert response.json()["error"] == "transaction_authorization_required"
    assert reviewer.consumes == []


async def test_the_protected_resource_metadata_names_reviewer_and_the_challenge_keys(call, reviewer):
    metadata = (await call("GET", "/.well-known/oauth-protected-resource")).json()

    assert metadata["resource"] == AUDIENCE
    assert metadata["authorization_servers"] == [reviewer.url]
    assert metadata["txn_challenge_jwks_uri"] == f"{AUDIENCE}/.well-known/txn-challenge-jwks.json"
    assert metadata["txn_challenge_signing_alg_values_supported"] == ["EdDSA"]


async def test_an_unprotected_route_passes_through_untouched(call, ledger):
    assert (await call("GET", "/health")).json() == {"ok": "yes"}


async def test_a_body_that_cannot_be_described_is_refused_before_anything_runs(call, ledger):
    response = await call("POST", "/refunds/1182", content=b"not json", headers=CAROL)

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert ledger.runs == []


async def test_an_amount_sent_as_a_json_number_is_refused_as_ambiguous(call, ledger):
    response = await call("POST", "/refunds/1182", json={"amount": 40.0, "currency": "EUR"}, headers=CAROL)

    assert response.status_code == 400
    assert "as strings" in response.json()["error_description"]


# --- the approved call, once -------------------------------------------------------------------------


async def test_an_approved_token_runs_the_handler_once_after_consuming_it_and_reports_the_outcome(
    call, ledger, reviewer, key
):
    token = await approved_token(call, reviewer, key)

    response = await call("POST", "/refunds/1182", json=REFUND, headers=bearer(token))

    assert response.status_code == 200, response.text
    jti = jwt.decode(token, options={"verify_signature": False})["jti"]
    assert ledger.runs == [{"order_id": "1182", **REFUND, "jti": jti}]
    assert [call["body"] for call in reviewer.consumes_for(jti)] == [{"rev": 2}]
    assert reviewer.consumes_for(jti)[0]["authorization"] == "Bearer resource-api-token"
    assert reviewer.outcomes_for(jti) == ["succeeded"]


async def test_a_replayed_token_is_refused_and_nothing_runs_again(call, ledger, reviewer, key):
    token = await approved_token(call, reviewer, key)
    assert (await call("POST", "/refunds/1182", json=REFUND, headers=bearer(token))).status_code == 200

    replay = await call("POST", "/refunds/1182", json=REFUND, headers=bearer(token))

    assert replay.status_code == 401
    assert replay.json()["error"] == "invalid_token"
    assert replay.json()["reviewer_gate_code"] == "replayed"
    assert 'error="invalid_token"' in replay.headers["www-authenticate"]
    assert len(ledger.runs) == 1


async def test_a_token_consumed_elsewhere_is_refused_by_reviewer_and_nothing_runs(
    call, ledger, reviewer, key
):
    token = await approved_token(call, reviewer, key)
    jti = jwt.decode(token, options={"verify_signature": False})["jti"]
    reviewer.consume_answers[jti] = (409, {"error": {"code": "consumed", "message": "already executing"}})

    response = await call("POST", "/refunds/1182", json=REFUND, headers=bearer(token))

    assert response.status_code == 401
    assert response.json()["reviewer_gate_code"] == "consume_refused:consumed"
    assert ledger.runs == []


async def test_a_revoked_approval_is_refused_at_consume_and_nothing_runs(call, ledger, reviewer, key):
    token = await approved_token(call, reviewer, key)
    jti = jwt.decode(token, options={"verify_signature": False})["jti"]
    reviewer.consume_answers[jti] = (409, {"error": {"code": "revoked", "message": "revoked by Alice"}})

    response = await call("POST", "/refunds/1182", json=REFUND, headers=bearer(token))

    assert response.status_code == 401
    assert response.json() == {
        "error": "invalid_token",
        "error_description": "revoked by Alice",
        "reviewer_gate_code": "consume_refused:revoked",
    }
    assert ledger.runs == []


async def test_a_rejection_is_refused_as_access_denied(call, ledger, reviewer, key):
    token = await approved_token(call, reviewer, key, decision="rejected", reason="not this customer")

    response = await call("POST", "/refunds/1182", json=REFUND, headers=bearer(token))

    assert response.status_code == 403
    assert response.json()["error"] == "access_denied"
    assert "not this customer" in response.json()["error_description"]
    assert ledger.runs == [] and reviewer.consumes == []


# --- another operation -------------------------------------------------------------------------------


async def test_a_changed_amount_is_refused_and_the_token_is_not_used_up(call, ledger, reviewer, key):
    token = await approved_token(call, reviewer, key)

    changed = await call(
        "POST", "/refunds/1182", json={"amount": "4000.00", "currency": "EUR"}, headers=bearer(token)
    )

    assert changed.status_code == 403
    assert changed.json()["error"] == "insufficient_scope"
    assert changed.json()["reviewer_gate_code"] == "wrong_operation"
    assert ledger.runs == [] and reviewer.consumes == []
    # Refused before its jti was burned: the approved request itself still runs.
    assert (await call("POST", "/refunds/1182", json=REFUND, headers=bearer(token))).status_code == 200


async def test_a_token_for_another_order_is_refused(call, ledger, reviewer, key):
    token = await approved_token(call, reviewer, key)

    response = await call("POST", "/refunds/9999", json=REFUND, headers=bearer(token))

    assert response.status_code == 403
    assert response.json()["reviewer_gate_code"] == "wrong_operation"
    assert ledger.runs == []


async def test_a_token_taken_to_another_route_with_the_same_description_is_refused(
    call, ledger, reviewer, key
):
    token = await approved_token(call, reviewer, key)

    response = await call("POST", "/payouts/1182", json=REFUND, headers=bearer(token))

    assert response.status_code == 403
    assert response.json()["reviewer_gate_code"] == "wrong_txn"
    assert ledger.runs == []


async def test_a_body_changed_outside_the_description_is_refused(call, ledger, reviewer, key):
    token = await approved_token(call, reviewer, key)

    response = await call(
        "POST", "/refunds/1182", json={**REFUND, "note": "and the shipping too"}, headers=bearer(token)
    )

    assert response.status_code == 403
    assert response.json()["reviewer_gate_code"] == "wrong_txn"
    assert ledger.runs == []


async def test_a_token_presented_by_another_caller_is_refused(call, ledger, reviewer, key):
    token = await approved_token(call, reviewer, key)

    response = await call("POST", "/refunds/1182", json=REFUND, headers=bearer(token, DAVE))

    assert response.status_code == 403
    assert response.json()["reviewer_gate_code"] == "wrong_txn"
    assert ledger.runs == []


async def test_a_token_for_another_resource_is_refused(call, ledger, reviewer, key):
    token = await approved_token(call, reviewer, key, aud="https://other-resource.example")

    response = await call("POST", "/refunds/1182", json=REFUND, headers=bearer(token))

    assert response.status_code == 401
    assert response.json()["reviewer_gate_code"] == "wrong_audience"
    assert ledger.runs == []


async def test_a_token_whose_txn_this_resource_never_issued_is_refused(call, ledger, reviewer, key):
    token = await approved_token(call, reviewer, key, txn="made-up.txn")

    response = await call("POST", "/refunds/1182", json=REFUND, headers=bearer(token))

    assert response.status_code == 403
    assert response.json()["reviewer_gate_code"] == "wrong_txn"
    assert ledger.runs == []


async def test_a_token_signed_by_another_key_is_refused(call, ledger, reviewer):
    from reviewer_gate.testing import ReviewerKey

    stranger = ReviewerKey(kid=reviewer.keys[0].kid)
    token = await approved_token(call, reviewer, stranger)

    response = await call("POST", "/refunds/1182", json=REFUND, headers=bearer(token))

    assert response.status_code == 401
    assert response.json()["reviewer_gate_code"] == "bad_signature"
    assert ledger.runs == []


# --- outcomes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "outcome"), [(201, "succeeded"), (422, "failed"), (500, "unknown")])
async def test_the_handlers_status_is_reported_as_the_outcome(reviewer, resource_key, key, status, outcome):
    guard = make_guard(reviewer, resource_key)
    ledger = Ledger()
    app = refund_service(ledger, status=status)
    app.add_middleware(ReviewerGateMiddleware, guard=guard)

    async def send(method: str, path: str, **kwargs: Any) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=AUDIENCE) as client:
            return await client.request(method, path, **kwargs)

    token = await approved_token(send, reviewer, key)
    assert (await send("POST", "/refunds/1182", json=REFUND, headers=bearer(token))).status_code == status

    jti = jwt.decode(token, options={"verify_signature": False})["jti"]
    assert reviewer.outcomes_for(jti) == [outcome]


# --- the 202 mode --------------------------------------------------------------------------------------


@pytest.fixture
def intake_call(reviewer, resource_key, ledger):
    guard = make_guard(reviewer, resource_key, intake=True)
    app = refund_service(ledger)
    app.add_middleware(ReviewerGateMiddleware, guard=guard)

    async def send(method: str, path: str, **kwargs: Any) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=AUDIENCE) as client:
            return await client.request(method, path, **kwargs)

    yield send
    guard.close()


def sign_decision_for(reviewer, key, proposal_body: dict[str, Any], decision: str = "approved") -> str:
    from reviewer_gate.testing import decision_claims

    return key.sign(
        decision_claims(
            issuer=reviewer.url,
            audience=AUDIENCE,
            task_id=proposal_body["task_id"],
            request_id=proposal_body["request"]["request_id"],
            action_digest=proposal_body["request"]["action_digest"],
            context_id=proposal_body["context_id"],
            decision=decision,
        )
    )


async def test_a_caller_without_tac_gets_202_and_the_same_request_runs_once_after_approval(
    intake_call, ledger, reviewer, key
):
    pending = await intake_call("POST", "/refunds/1182", json=REFUND, headers=CAROL)

    assert pending.status_code == 202
    assert pending.headers["retry-after"] == "5"
    assert pending.headers["location"] == pending.json()["status_url"]
    assert ledger.runs == []
    [filed] = [call["body"] for call in reviewer.proposals]
    assert filed["request"]["principal"] == {"id": "carol"}
    assert filed["request"]["action"] == {
        "tool": "payments.refund",
        "arguments": {"amount": "40.00", "currency": "EUR", "order_id": "1182"},
        "target": f"{AUDIENCE}/orders/1182",
    }
    assert filed["task_id"] == filed["request"]["request_id"]

    # Sent again before anyone decided: the same proposal, still pending.
    again = await intake_call("POST", "/refunds/1182", json=REFUND, headers=CAROL)
    assert again.status_code == 202 and again.json()["proposal_id"] == pending.json()["proposal_id"]

    reviewer.decide(pending.json()["proposal_id"], sign_decision_for(reviewer, key, filed))
    ran = await intake_call("POST", "/refunds/1182", json=REFUND, headers=CAROL)
    assert ran.status_code == 200, ran.text
    assert len(ledger.runs) == 1

    replay = await intake_call("POST", "/refunds/1182", json=REFUND, headers=CAROL)
    assert replay.status_code == 409
    assert replay.json()["error"] == "already_executed"
    assert len(ledger.runs) == 1


async def test_in_the_202_mode_a_request_policy_allows_runs_at_once_on_one_reviewer_request(
    intake_call, ledger, reviewer, key
):
    decide_at_intake(reviewer, key, audience=AUDIENCE)

    ran = await intake_call("POST", "/refunds/1182", json=REFUND, headers=CAROL)

    assert ran.status_code == 200, ran.text
    assert len(ledger.runs) == 1
    [filed] = reviewer.proposals
    assert filed["prefer"] == "decision-in-answer, consume"
    assert len(reviewer.consumed_at_intake) == 1 and reviewer.consumes == []  # consumed at intake
    jti = jwt.decode(reviewer.token_of(reviewer.consumed_at_intake[0]), options={"verify_signature": False})
    assert reviewer.outcomes_for(jti["jti"]) == ["succeeded"]

    replay = await intake_call("POST", "/refunds/1182", json=REFUND, headers=CAROL)
    assert replay.status_code == 409 and replay.json()["error"] == "already_executed"
    assert len(ledger.runs) == 1


async def test_in_the_202_mode_a_reviewer_that_does_not_consume_at_intake_gets_the_consume_call(
    intake_call, ledger, reviewer, key
):
    reviewer.consume_at_intake = False
    decide_at_intake(reviewer, key, audience=AUDIENCE)

    ran = await intake_call("POST", "/refunds/1182", json=REFUND, headers=CAROL)

    assert ran.status_code == 200, ran.text
    assert len(ledger.runs) == 1 and len(reviewer.consumes) == 1


async def test_in_the_202_mode_a_caller_that_speaks_tac_still_gets_the_challenge(intake_call, reviewer):
    response = await intake_call("POST", "/refunds/1182", json=REFUND, headers={**CAROL, **TAC})

    assert response.status_code == 401
    challenge_of(response)
    assert reviewer.proposals == []


async def test_in_the_202_mode_a_rejection_is_refused_and_nothing_runs(intake_call, ledger, reviewer, key):
    pending = await intake_call("POST", "/refunds/1182", json=REFUND, headers=CAROL)
    filed = reviewer.proposals[0]["body"]
    reviewer.decide(pending.json()["proposal_id"], sign_decision_for(reviewer, key, filed, "rejected"))

    response = await intake_call("POST", "/refunds/1182", json=REFUND, headers=CAROL)

    assert response.status_code == 403
    assert response.json()["error"] == "access_denied"
    assert ledger.runs == []


async def test_in_the_202_mode_an_unauthenticated_caller_files_nothing(intake_call, reviewer):
    response = await intake_call("POST", "/refunds/1182", json=REFUND)

    assert response.status_code == 401
    assert reviewer.proposals == []


async def test_in_the_202_mode_another_idempotency_key_is_another_request(intake_call, reviewer):
    first = await intake_call("POST", "/refunds/1182", json=REFUND, headers={**CAROL, "Idempotency-Key": "a"})
    second = await intake_call(
        "POST", "/refunds/1182", json=REFUND, headers={**CAROL, "Idempotency-Key": "b"}
    )

    assert first.json()["request_id"] != second.json()["request_id"]


# --- WSGI (Django, Flask) --------------------------------------------------------------------------------


def wsgi_refund_app(ledger: Ledger):
    def app(environ, start_response):
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        decision = environ.get("reviewer_gate.decision")
        ledger.runs.append(
            {"path": environ["PATH_INFO"], "body": body, "jti": decision.jti if decision else None}
        )
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b'{"ok": true}']

    return app


def test_the_wsgi_middleware_challenges_runs_an_approved_call_once_and_refuses_its_replay(
    reviewer, key, resource_key
):
    guard = make_guard(reviewer, resource_key)
    ledger = Ledger()
    app = ReviewerGateWSGIMiddleware(wsgi_refund_app(ledger), guard=guard)
    client = httpx.Client(transport=httpx.WSGITransport(app=app), base_url=AUDIENCE)
    body = json.dumps(REFUND).encode()

    challenged = client.post("/refunds/1182", content=body, headers=CAROL)
    assert challenged.status_code == 401 and ledger.runs == []
    token = grant_challenge(reviewer, key, challenge_of(challenged))

    ran = client.post("/refunds/1182", content=body, headers=bearer(token))
    replay = client.post("/refunds/1182", content=body, headers=bearer(token))
    changed = client.post("/refunds/1182", content=body.replace(b"40.00", b"400.00"), headers=bearer(token))

    assert ran.status_code == 200
    assert [run["body"] for run in ledger.runs] == [body]
    jti = jwt.decode(token, options={"verify_signature": False})["jti"]
    assert ledger.runs[0]["jti"] == jti
    assert reviewer.outcomes_for(jti) == ["succeeded"]
    assert replay.status_code == 401 and replay.json()["reviewer_gate_code"] == "replayed"
    assert changed.status_code == 403 and changed.json()["reviewer_gate_code"] == "wrong_operation"
    assert len(ledger.runs) == 1
    guard.close()


# --- the one rule -------------------------------------------------------------------------------------


def test_the_transaction_rule_compares_authorization_details_whatever_their_key_order():
    details = [{"type": "refund", "amount": "40.00", "currency": "EUR"}]
    claims = {"txn": "t", "authorization_details": [{"currency": "EUR", "amount": "40.00", "type": "refund"}]}

    check_transaction(claims, txn="t", authorization_details=details)
    with pytest.raises(GateError) as changed:
        check_transaction(claims, txn="t", authorization_details=[{**details[0], "amount": "40.0"}])
    assert changed.value.code == "wrong_operation"
    with pytest.raises(GateError) as missing:
        check_transaction({"txn": "t"}, txn="t", authorization_details=details)
    assert missing.value.code == "missing_claim"


def test_the_transaction_rule_requires_the_signed_action_to_be_the_same_operation():
    from reviewer_gate.decision import action_digest

    detail = {"type": "refund", "amount": "40.00", "currency": "EUR"}
    action = {"tool": "payments.refund", "arguments": detail}
    claims = {
        "txn": "t",
        "authorization_details": [detail],
        "action": action,
        "action_digest": action_digest(action),
    }
    check_transaction(claims, txn="t", authorization_details=[detail])

    other = {"tool": "payments.refund", "arguments": {**detail, "amount": "4000.00"}}
    with pytest.raises(GateError) as other_action:
        check_transaction(
            {**claims, "action": other, "action_digest": action_digest(other)},
            txn="t",
            authorization_details=[detail],
        )
    assert other_action.value.code == "wrong_operation"
    with pytest.raises(GateError) as unsigned_action:
        check_transaction({**claims, "action": other}, txn="t", authorization_details=[detail])
    assert unsigned_action.value.code == "wrong_digest"


async def test_a_description_of_two_operations_is_refused_before_anything_runs(reviewer, resource_key):
    two = Route("POST", "/refunds/{order_id}", lambda request: [describe_refund(request)] * 2)
    guard = ResourceGuard(
        routes=[two], audience=AUDIENCE, reviewer_url=reviewer.url, api_token="t", key=resource_key
    )

    answer = guard.handle(ProtectedRequest("POST", "/refunds/1182", body=json.dumps(REFUND).encode()))

    assert answer is not None and not hasattr(answer, "decision")
    assert answer.status == 400  # type: ignore[union-attr]
    guard.close()


async def test_reviewer_unreachable_at_consume_fails_closed_with_503(call, ledger, reviewer, key):
    token = await approved_token(call, reviewer, key)
    reviewer.unavailable_answers = 1  # the consume meets a Reviewer answering 503

    response = await call("POST", "/refunds/1182", json=REFUND, headers=bearer(token))

    assert response.status_code == 503
    assert response.json()["error"] == "temporarily_unavailable"
    assert ledger.runs == []


async def test_reviewers_keys_unreachable_fail_closed_with_503(reviewer, key, resource_key):
    from reviewer_gate.testing import FakeReviewer

    ledger = Ledger()
    gone = FakeReviewer([key]).start()
    gone_url = gone.url
    gone.stop()  # nothing listens there any more: the JWKS cannot be fetched
    guard = make_guard(reviewer, resource_key, jwks_url=f"{gone_url}/.well-known/jwks.json")
    app = refund_service(ledger)
    app.add_middleware(ReviewerGateMiddleware, guard=guard)

    async def send(method: str, path: str, **kwargs: Any) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=AUDIENCE) as client:
            return await client.request(method, path, **kwargs)

    token = await approved_token(send, reviewer, key)
    response = await send("POST", "/refunds/1182", json=REFUND, headers=bearer(token))

    assert response.status_code == 503
    assert response.json()["reviewer_gate_code"] == "keys_unavailable"
    assert ledger.runs == []
    guard.close()


# --- the caller's trace --------------------------------------------------------------------------------

CALLER_TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_the_resource_carries_its_callers_traceparent_to_reviewer(reviewer, key, resource_key):
    """A resource whose own server records no span still links the caller's trace to Reviewer's spans
    of the decision: its consume and its outcome report carry the incoming traceparent; a malformed one
    is not passed on."""
    guard = make_guard(reviewer, resource_key)
    app = ReviewerGateWSGIMiddleware(wsgi_refund_app(Ledger()), guard=guard)
    client = httpx.Client(transport=httpx.WSGITransport(app=app), base_url=AUDIENCE)
    body = json.dumps(REFUND).encode()
    traced = {"traceparent": CALLER_TRACEPARENT}

    token = grant_challenge(
        reviewer, key, challenge_of(client.post("/refunds/1182", content=body, headers=CAROL))
    )
    ran = client.post("/refunds/1182", content=body, headers={**bearer(token), **traced})
    token = grant_challenge(
        reviewer, key, challenge_of(client.post("/refunds/1183", content=body, headers=CAROL))
    )
    garbled = client.post("/refunds/1183", content=body, headers={**bearer(token), "traceparent": "00-zz-01"})

    assert ran.status_code == 200 and garbled.status_code == 200
    assert [call["traceparent"] for call in reviewer.consumes] == [CALLER_TRACEPARENT, None]
    assert [call["traceparent"] for call in reviewer.outcomes] == [CALLER_TRACEPARENT, None]
    guard.close()
