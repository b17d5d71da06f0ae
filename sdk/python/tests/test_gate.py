"""reviewer_gate.gate: every way a decision token is refused, single use, consume, and the action digest.

Real Ed25519 keys, real HTTP servers on loopback; no Django.
"""

import hashlib
import hmac
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import jwt
import pytest

from reviewer_gate import gate
from reviewer_gate.testing import ReviewerKey, b64url, decision_claims

ISSUER = "https://reviewer.example"
AUDIENCE = "http://127.0.0.1:8001/.well-known/agent-card.json"
TASK_ID = "task-1"
REQUEST_ID = "request-1"
ACTION = {
    "tool": "payments.refund",
    "arguments": {"order_id": "1182", "amount": "40.00", "currency": "EUR"},
    "target": "order:1182",
}
DIGEST = gate.action_digest(ACTION)
GATE_FILE = Path(gate.__file__)  # the installed module (the wheel's, in `make test`)


@pytest.fixture
def used_store():
    return gate.MemoryUsedStore()


@pytest.fixture
def the_gate(key, used_store):
    return gate.Gate(
        issuer=ISSUER,
        audience=AUDIENCE,
        keys=gate.StaticKeySource({"keys": [key.jwk()]}),
        used_store=used_store,
    )


def claims(**overrides) -> dict:
    binding = {
        "issuer": ISSUER,
        "audience": AUDIENCE,
        "task_id": TASK_ID,
        "request_id": REQUEST_ID,
        "action_digest": DIGEST,
    }
    return decision_claims(**{**binding, **overrides})


def verify(the_gate, token, **binding):
    expected = {"task_id": TASK_ID, "request_id": REQUEST_ID, "action_digest": DIGEST, **binding}
    return the_gate.verify(token, **expected)


def refused_code(the_gate, token, **binding) -> str:
    with pytest.raises(gate.GateError) as refused:
        verify(the_gate, token, **binding)
    return refused.value.code


# --- what verifies --------------------------------------------------------------------------------


def test_an_approved_decision_for_the_asked_action_verifies(the_gate, key):
    signed = claims()
    decision = verify(the_gate, key.sign(signed))
    assert decision.approved
    assert (decision.jti, decision.task_id, decision.request_id) == (signed["jti"], TASK_ID, REQUEST_ID)
    assert (decision.action_digest, decision.rev, decision.consume) == (DIGEST, 2, True)
    assert decision.expires_at == signed["exp"]
    assert decision.approvers[0]["name"] == "Rita Reviewer"
    assert decision.policy == {"id": "refunds", "version": 3} and decision.tenant == "acme"
    assert decision.claims["proposal_id"] == decision.proposal_id == signed["proposal_id"]


def test_a_rejected_decision_verifies_but_is_not_an_approval(the_gate, key):
    decision = verify(the_gate, key.sign(claims(decision="rejected", reason="no proof of loss")))
    assert decision.decision == "rejected" and not decision.approved
    assert decision.reason == "no proof of loss"


def test_a_decision_slightly_expired_within_the_leeway_still_verifies(the_gate, key):
    now = int(time.time())
    assert verify(the_gate, key.sign(claims(now=now - 610, lifetime=600))).approved


def test_the_context_id_is_checked_when_the_agent_gives_it(the_gate, key):
    assert (
        refused_code(the_gate, key.sign(claims(context_id="ctx-other")), context_id="ctx-1")
        == "wrong_context"
    )


# --- what is refused ------------------------------------------------------------------------------


def test_a_token_with_an_altered_payload_is_refused_as_bad_signature(the_gate, key):
    header, _, signature = key.sign(claims()).split(".")
    richer = b64url(json.dumps(claims(action_digest="sha256:" + "0" * 64)).encode())
    assert refused_code(the_gate, f"{header}.{richer}.{signature}") == "bad_signature"


def test_a_token_signed_by_a_foreign_key_under_a_known_kid_is_refused(the_gate, key):
    foreign = ReviewerKey(kid=key.kid)
    assert refused_code(the_gate, foreign.sign(claims())) == "bad_signature"


def test_a_token_naming_an_unknown_kid_is_refused(the_gate):
    assert refused_code(the_gate, ReviewerKey().sign(claims())) == "unknown_kid"


def test_alg_none_is_refused(the_gate, key):
    unsigned = jwt.encode(claims(), None, algorithm="none", headers={"kid": key.kid, "typ": gate.TOKEN_TYPE})
    assert refused_code(the_gate, unsigned) == "bad_algorithm"


def test_hs256_signed_with_the_public_key_bytes_is_refused(the_gate, key):
    header = b64url(json.dumps({"alg": "HS256", "typ": gate.TOKEN_TYPE, "kid": key.kid}).encode())
    payload = b64url(json.dumps(claims()).encode())
    for secret in (key.public_raw(), key.jwk()["x"].encode()):
        mac = hmac.new(secret, f"{header}.{payload}".encode(), hashlib.sha256).digest()
        assert refused_code(the_gate, f"{header}.{payload}.{b64url(mac)}") == "bad_algorithm"


def test_a_token_for_another_audience_is_refused(the_gate, key):
    assert (
        refused_code(the_gate, key.sign(claims(aud="http://127.0.0.1:9999/other-agent"))) == "wrong_audience"
    )


def test_a_token_from_another_issuer_is_refused(the_gate, key):
    assert refused_code(the_gate, key.sign(claims(iss="https://evil.example"))) == "wrong_issuer"


def tenant_gate(key, tenant: str) -> gate.Gate:
    return gate.Gate(
        issuer=ISSUER,
        audience=AUDIENCE,
        keys=gate.StaticKeySource({"keys": [key.jwk()]}),
        used_store=gate.MemoryUsedStore(),
        tenant=tenant,
    )


def test_a_gate_given_its_tenant_refuses_a_decision_for_another_tenant_under_its_own_audience(key):
    # Reviewer signed it for this audience, under tenant acme's policy; the agent is globex's.
    token = key.sign(claims(tenant="acme"))

    assert refused_code(tenant_gate(key, "globex"), token) == "wrong_tenant"
    assert refused_code(tenant_gate(key, "globex"), key.sign(claims(tenant=None))) == "wrong_tenant"
    assert verify(tenant_gate(key, "acme"), token).tenant == "acme"


def test_a_decision_refused_for_its_tenant_is_not_used_up(key, used_store):
    token = key.sign(claims(tenant="acme"))
    globex = tenant_gate(key, "globex")
    globex.used_store = used_store

    assert refused_code(globex, token) == "wrong_tenant"
    assert used_store.claim(jwt.decode(token, options={"verify_signature": False})["jti"], 0)


def test_a_gate_without_an_issuer_audience_or_with_an_empty_tenant_refuses_to_exist(key):
    keys = gate.StaticKeySource({"keys": [key.jwk()]})
    for missing in ({"issuer": None}, {"issuer": ""}, {"audience": None}, {"tenant": ""}):
        settings = {"issuer": ISSUER, "audience": AUDIENCE, **missing}
        with pytest.raises(gate.GateError) as refused:
            gate.Gate(**settings, keys=keys, used_store=gate.MemoryUsedStore())
        assert refused.value.code == "not_configured", missing


def test_an_expired_token_is_refused(the_gate, key):
    assert refused_code(the_gate, key.sign(claims(now=int(time.time()) - 700, lifetime=600))) == "expired"


def test_a_token_not_yet_valid_is_refused(the_gate, key):
    assert refused_code(the_gate, key.sign(claims(nbf=int(time.time()) + 600))) == "not_yet_valid"


def test_a_token_replayed_onto_another_task_is_refused(the_gate, key):
    assert refused_code(the_gate, key.sign(claims()), task_id="task-2") == "wrong_task"


def test_a_token_for_another_request_is_refused(the_gate, key):
    assert refused_code(the_gate, key.sign(claims(request_id="request-0"))) == "wrong_request"


def test_a_token_for_another_action_digest_is_refused(the_gate, key):
    other = gate.action_digest({**ACTION, "arguments": {**ACTION["arguments"], "amount": "400.00"}})
    assert refused_code(the_gate, key.sign(claims(action_digest=other))) == "wrong_digest"


def test_a_token_used_twice_is_refused_the_second_time(the_gate, key):
    token = key.sign(claims())
    verify(the_gate, token)
    assert refused_code(the_gate, token) == "replayed"


def test_a_token_with_another_typ_is_refused(the_gate, key):
    assert refused_code(the_gate, key.sign(claims(), typ="JWT")) == "bad_type"


def test_a_token_without_a_required_claim_is_refused(the_gate, key):
    signed = claims()
    del signed["request_id"]
    assert refused_code(the_gate, key.sign(signed)) == "missing_claim"


def test_a_token_with_an_unknown_decision_is_refused(the_gate, key):
    assert refused_code(the_gate, key.sign(claims(decision="maybe"))) == "bad_decision"


def test_garbage_is_refused_as_malformed(the_gate):
    assert refused_code(the_gate, "not-a-token") == "malformed"
    assert refused_code(the_gate, "a.b.c") == "malformed"


def test_a_refused_token_does_not_use_up_its_decision(the_gate, key):
    token = key.sign(claims())
    assert refused_code(the_gate, token, request_id="request-other") == "wrong_request"
    assert verify(the_gate, token).approved


# --- JWKS -----------------------------------------------------------------------------------------


def jwks_gate(reviewer, **source_options):
    source = gate.JWKSKeySource(f"{reviewer.url}/.well-known/jwks.json", **source_options)
    return gate.Gate(issuer=ISSUER, audience=AUDIENCE, keys=source, used_store=gate.MemoryUsedStore())


def test_an_unknown_kid_refreshes_the_jwks_once_then_is_refused(reviewer, key):
    the_gate = jwks_gate(reviewer, min_refresh_seconds=0)
    verify(the_gate, key.sign(claims()))
    assert reviewer.jwks_fetches == 1
    assert refused_code(the_gate, ReviewerKey().sign(claims())) == "unknown_kid"
    assert reviewer.jwks_fetches == 2


def test_a_rotated_key_is_found_by_the_one_refresh(reviewer, key):
    the_gate = jwks_gate(reviewer, min_refresh_seconds=0)
    verify(the_gate, key.sign(claims()))
    rotated = ReviewerKey()
    reviewer.keys.append(rotated)
    assert verify(the_gate, rotated.sign(claims())).approved
    assert reviewer.jwks_fetches == 2


def test_unknown_kids_cannot_make_the_gate_refetch_the_jwks_in_a_loop(reviewer, key):
    the_gate = jwks_gate(reviewer, min_refresh_seconds=60)
    verify(the_gate, key.sign(claims()))
    for _ in range(5):
        assert refused_code(the_gate, ReviewerKey().sign(claims())) == "unknown_kid"
    assert reviewer.jwks_fetches == 1


def test_an_unreachable_jwks_fails_closed():
    the_gate = gate.Gate(
        issuer=ISSUER,
        audience=AUDIENCE,
        used_store=gate.MemoryUsedStore(),
        keys=gate.JWKSKeySource(f"http://127.0.0.1:{closed_port()}/.well-known/jwks.json"),
    )
    assert refused_code(the_gate, ReviewerKey().sign(claims())) == "keys_unavailable"


class CountedClient(httpx.Client):
    """A real httpx client that counts how many are made (the requests still go to the fake Reviewer)."""

    made = 0

    def __init__(self, *args, **kwargs):
        type(self).made += 1
        super().__init__(*args, **kwargs)


def test_a_jwks_source_makes_one_http_client_for_all_its_refreshes(reviewer, key, monkeypatch):
    # A new client costs its TLS context, tens of milliseconds, on the request path under the key lock.
    monkeypatch.setattr(CountedClient, "made", 0)
    monkeypatch.setattr(httpx, "Client", CountedClient)
    the_gate = jwks_gate(reviewer, min_refresh_seconds=0)
    verify(the_gate, key.sign(claims()))
    rotated = ReviewerKey()
    reviewer.keys.append(rotated)
    assert verify(the_gate, rotated.sign(claims())).approved
    assert reviewer.jwks_fetches == 2
    assert CountedClient.made == 1


def test_a_closed_gate_refreshes_its_jwks_again_on_the_next_verification(reviewer, key):
    the_gate = jwks_gate(reviewer, min_refresh_seconds=0)
    verify(the_gate, key.sign(claims()))
    the_gate.close()
    rotated = ReviewerKey()
    reviewer.keys.append(rotated)
    assert verify(the_gate, rotated.sign(claims())).approved
    assert reviewer.jwks_fetches == 2


def test_an_injected_fetch_function_replaces_http(key):
    fetched = []
    source = gate.JWKSKeySource(
        "memory:jwks", fetch=lambda url, timeout: fetched.append(url) or {"keys": [key.jwk()]}
    )
    the_gate = gate.Gate(issuer=ISSUER, audience=AUDIENCE, keys=source, used_store=gate.MemoryUsedStore())
    assert verify(the_gate, key.sign(claims())).approved
    assert fetched == ["memory:jwks"] and source.fetch_count == 1


# --- single use across processes --------------------------------------------------------------------


def test_sqlite_used_store_lets_a_decision_be_claimed_once_across_two_stores(tmp_path):
    first, second = gate.SQLiteUsedStore(tmp_path / "used.db"), gate.SQLiteUsedStore(tmp_path / "used.db")
    expires = int(time.time()) + 600
    assert first.claim("jti-1", expires) is True
    assert second.claim("jti-1", expires) is False
    assert first.claim("jti-1", expires) is False
    assert second.claim("jti-2", expires) is True


def test_sqlite_used_store_has_one_winner_when_threads_race(tmp_path):
    stores = [gate.SQLiteUsedStore(tmp_path / "used.db") for _ in range(8)]
    start = threading.Barrier(len(stores))
    results = []

    def claim(store):
        start.wait()
        results.append(store.claim("contested", int(time.time()) + 600))

    threads = [threading.Thread(target=claim, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(results) == [False] * 7 + [True]


def test_two_gates_sharing_a_sqlite_store_act_on_a_decision_once(tmp_path, key):
    def make_gate():
        return gate.Gate(
            issuer=ISSUER,
            audience=AUDIENCE,
            keys=gate.StaticKeySource({"keys": [key.jwk()]}),
            used_store=gate.SQLiteUsedStore(tmp_path / "used.db"),
        )

    token = key.sign(claims())
    assert verify(make_gate(), token).approved
    assert refused_code(make_gate(), token) == "replayed"


# --- consume and outcome ----------------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def online_gate(reviewer_url: str, key) -> gate.Gate:
    return gate.Gate(
        issuer=ISSUER,
        audience=AUDIENCE,
        keys=gate.StaticKeySource({"keys": [key.jwk()]}),
        used_store=gate.MemoryUsedStore(),
        reviewer_url=reviewer_url,
        api_token="agent-api-token",
        http_timeout=2,
    )


def test_consume_returns_when_reviewer_answers_200(reviewer, key):
    the_gate = online_gate(reviewer.url, key)
    decision = verify(the_gate, key.sign(claims(rev=5)))
    the_gate.consume(decision)
    (call,) = reviewer.consumes_for(decision.jti)
    assert call["body"] == {"rev": 5}
    assert call["authorization"] == "Bearer agent-api-token"


def test_consume_refused_with_409_raises_with_reviewers_code(reviewer, key):
    the_gate = online_gate(reviewer.url, key)
    decision = verify(the_gate, key.sign(claims()))
    reviewer.consume_answers[decision.jti] = (
        409,
        {"error": {"code": "revoked", "message": "revoked by admin"}},
    )
    with pytest.raises(gate.GateError) as refused:
        the_gate.consume(decision)
    assert refused.value.code == "consume_refused:revoked"
    assert "revoked by admin" in refused.value.message


def test_consume_answered_with_a_server_error_means_reviewer_unreachable(reviewer, key):
    the_gate = online_gate(reviewer.url, key)
    decision = verify(the_gate, key.sign(claims()))
    reviewer.consume_answers[decision.jti] = (503, {"error": {"code": "busy", "message": "later"}})
    with pytest.raises(gate.GateError) as refused:
        the_gate.consume(decision)
    assert refused.value.code == "reviewer_unreachable"


def test_consume_with_reviewer_down_fails_closed(key):
    the_gate = online_gate(f"http://127.0.0.1:{closed_port()}", key)
    decision = verify(the_gate, key.sign(claims()))
    with pytest.raises(gate.GateError) as refused:
        the_gate.consume(decision)
    assert refused.value.code == "reviewer_unreachable"


def test_a_rejected_decision_can_never_be_consumed(reviewer, key):
    the_gate = online_gate(reviewer.url, key)
    decision = verify(the_gate, key.sign(claims(decision="rejected")))
    with pytest.raises(gate.GateError) as refused:
        the_gate.consume(decision)
    assert refused.value.code.startswith("consume_refused:")
    assert reviewer.consumes_for(decision.jti) == []


def test_report_outcome_posts_the_status_and_is_best_effort(reviewer, key):
    the_gate = online_gate(reviewer.url, key)
    decision = verify(the_gate, key.sign(claims()))
    assert the_gate.report_outcome(decision, "succeeded", transaction_id="txn_1") is True
    assert reviewer.outcomes[-1]["body"] == {"status": "succeeded", "transaction_id": "txn_1"}
    down = online_gate(f"http://127.0.0.1:{closed_port()}", key)
    assert down.report_outcome(decision, "unknown", detail="lost") is False


# --- the action digest and the metadata helpers ----------------------------------------------------


def test_action_digest_is_sha256_of_the_rfc8785_form():
    canonical = (
        b'{"arguments":{"amount":"40.00","currency":"EUR","order_id":"1182"},'
        b'"target":"order:1182","tool":"payments.refund"}'
    )
    expected = "sha256:" + hashlib.sha256(canonical).hexdigest()
    assert gate.action_digest(ACTION) == expected
    assert expected == "sha256:f37c42dddc921af356953694a9b48f703140a09d471ad6100b69719fef17000e"


def test_action_digest_ignores_key_order():
    reordered = {
        "target": "order:1182",
        "arguments": {"currency": "EUR", "amount": "40.00", "order_id": "1182"},
        "tool": "payments.refund",
    }
    assert gate.action_digest(reordered) == gate.action_digest(ACTION)


def test_action_digest_keeps_unicode_as_utf8():
    action = {"tool": "mail.send", "arguments": {"to": "zoë@example.com"}}
    canonical = '{"arguments":{"to":"zoë@example.com"},"tool":"mail.send"}'.encode()
    assert gate.action_digest(action) == "sha256:" + hashlib.sha256(canonical).hexdigest()


def test_action_digest_tells_a_number_from_a_string_but_not_40_from_40_point_0():
    as_string = gate.action_digest({"amount": "40.00"})
    assert as_string != gate.action_digest({"amount": 40.0})
    # A protobuf Struct turns 40 into 40.0; JCS writes both as 40, so the round trip keeps the digest.
    assert gate.action_digest({"amount": 40}) == gate.action_digest({"amount": 40.0})


def test_decision_token_is_read_from_the_extension_key_only():
    assert gate.decision_token_from_metadata({gate.EXTENSION_URI: {"decision": "a.b.c"}}) == "a.b.c"
    assert gate.decision_token_from_metadata({"decision": "a.b.c"}) is None
    assert gate.decision_token_from_metadata({gate.EXTENSION_URI: {"decision": 7}}) is None
    assert gate.decision_token_from_metadata({gate.EXTENSION_URI: "a.b.c"}) is None
    assert gate.decision_token_from_metadata(None) is None


def test_approval_request_metadata_puts_the_request_under_the_extension_key():
    request = {"request_id": "r-1", "action": ACTION, "action_digest": DIGEST}
    assert gate.approval_request_metadata(request) == {gate.EXTENSION_URI: {"request": request}}


def test_gate_loads_as_a_standalone_file_without_django():
    script = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('vendored_gate', {str(GATE_FILE)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "assert module.ALGORITHMS == ['EdDSA']\n"
        "leaked = sorted(name for name in sys.modules if name.split('.')[0] in ('django', 'approvals'))\n"
        "print(leaked)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd="/", check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# --- a reviewer's edit ----------------------------------------------------------------------------

EDITED_ACTION = {**ACTION, "arguments": {**ACTION["arguments"], "amount": "25.00"}}


def test_a_decision_for_a_reviewer_edit_of_the_request_verifies_and_carries_the_edited_action(the_gate, key):
    signed = claims(
        request_id=f"{REQUEST_ID}.edit1",
        action_digest=gate.action_digest(EDITED_ACTION),
        action=EDITED_ACTION,
        replaces=[REQUEST_ID],
    )
    decision = verify(the_gate, key.sign(signed))
    assert decision.edited and decision.action == EDITED_ACTION


def test_an_edit_whose_action_does_not_hash_to_the_signed_digest_is_refused(the_gate, key):
    signed = claims(
        request_id=f"{REQUEST_ID}.edit1",
        action_digest=gate.action_digest(EDITED_ACTION),
        action={**EDITED_ACTION, "target": "order:9999"},
        replaces=[REQUEST_ID],
    )
    assert refused_code(the_gate, key.sign(signed)) == "wrong_digest"


def test_a_decision_for_another_request_that_does_not_replace_the_asked_one_is_refused(the_gate, key):
    signed = claims(
        request_id="request-2",
        action_digest=gate.action_digest(EDITED_ACTION),
        action=EDITED_ACTION,
        replaces=["request-0"],
    )
    assert refused_code(the_gate, key.sign(signed)) == "wrong_request"


def test_an_unedited_decision_is_not_marked_edited(the_gate, key):
    decision = verify(the_gate, key.sign(claims(action=ACTION, replaces=["request-0"])))
    assert not decision.edited and decision.action == ACTION


# --- the policy object and the request's own deadline ---------------------------------------------


@pytest.mark.parametrize(
    "policy",
    [None, "refunds@3", {"id": "refunds"}, {"id": "", "version": 1}, {"id": "refunds", "version": "3"}],
)
def test_a_token_without_a_policy_object_is_refused_and_not_used_up(the_gate, key, policy):
    signed = claims(policy=policy)
    assert refused_code(the_gate, key.sign(signed)) == "bad_policy"
    assert the_gate.used_store.claim(signed["jti"], signed["exp"])  # the refusal did not burn it


def test_the_tenant_default_is_a_policy_object_like_any_other(the_gate, key):
    default = {"id": "tenant-default", "version": 1}
    decision = verify(the_gate, key.sign(claims(policy=default, policies=[default])))
    assert decision.policy == default and decision.policies == [default]


def test_policies_lists_every_version_that_shaped_the_decision(the_gate, key):
    shaped = [{"id": "refunds", "version": 1}, {"id": "refunds", "version": 2}]
    decision = verify(the_gate, key.sign(claims(policy=shaped[1], policies=shaped)))
    assert decision.policies == shaped
    # An older token without `policies` still verifies: its one policy is the list.
    assert verify(the_gate, key.sign(claims())).policies == [{"id": "refunds", "version": 3}]


@pytest.mark.parametrize("policies", ["refunds@1", [{"id": "refunds"}], [{"id": "other", "version": 1}]])
def test_a_policies_claim_that_is_not_a_list_of_objects_naming_policy_is_refused(the_gate, key, policies):
    assert refused_code(the_gate, key.sign(claims(policies=policies))) == "bad_policy"


def test_an_approval_after_the_requests_own_expires_at_is_refused(the_gate, key):
    now = int(time.time())
    token = key.sign(claims(now=now - 20, lifetime=600))  # the token itself is still valid
    assert refused_code(the_gate, token, expires_at=now - 5) == "request_expired"
    rfc3339 = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 5))
    assert refused_code(the_gate, token, expires_at=rfc3339) == "request_expired"


def test_an_approval_whose_exp_outlives_the_requests_deadline_is_refused(the_gate, key):
    now = int(time.time())
    assert refused_code(the_gate, key.sign(claims(lifetime=600)), expires_at=now + 60) == "request_expired"
    assert verify(the_gate, key.sign(claims(now=now, lifetime=60)), expires_at=now + 60).approved


def test_a_rejection_after_the_requests_deadline_still_informs_the_agent(the_gate, key):
    now = int(time.time())
    token = key.sign(claims(decision="rejected", reason="too late", lifetime=600))
    assert verify(the_gate, token, expires_at=now - 5).decision == "rejected"
