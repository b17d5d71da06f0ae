"""The standard doors over real HTTP: Reviewer under Daphne serving TLS on loopback (a certificate made
here), the test database (PostgreSQL when DATABASE_URL names it), people voting through the services.

- TAC: a minimal refund resource written here (http.server, no reviewer_gate code: the wire contract of
  docs/protect-an-api.md followed by hand; the resource kit itself runs against this endpoint in
  tests/e2e/test_protected_api.py) signs its challenge with its own Ed25519 key, and verifies,
  matches and consumes the token before it runs the refund. An agent calls it through
  `reviewer_gate.tac.TransactionAuthorization`; two people approve; the refund runs exactly once, and
  a replay, a changed amount and a token minted for another resource are refused.
- CIBA: `auth0-python`'s BackChannelLogin and GetToken (a client nobody here wrote) against Reviewer's
  /bc-authorize and /oauth/token, trusting the test's certificate through REQUESTS_CA_BUNDLE.
"""

import json
import ssl
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import jwt
import pytest
import rfc8785
from auth0.authentication import GetToken
from auth0.authentication.back_channel_login import BackChannelLogin
from auth0.authentication.exceptions import Auth0Error

import signing_keys as keys
from approvals.models import Proposal
from oauth.services import register_resource
from reviewer_gate.tac import TransactionAuthorization, TransactionAuthorizationError
from tests import factories
from tests.e2e.conftest import database_url, shared_signing_keys
from tests.e2e.test_deployment_tls import self_signed_certificate
from tests.examples.harness import free_port
from tests.oauth.challenges import ChallengeKey
from tests.reviewer_processes import ServerProcess, reviewer_env
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e]

REFUNDS = "https://refunds.example.test"
BOT_TOKEN = "e2e-bot-secret"


class TLSReviewer:
    """Daphne serving Reviewer over TLS on a loopback port (twisted's ssl endpoint)."""

    def __init__(self, folder):
        self.folder = folder
        self.cert, self.key = self_signed_certificate(folder)
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        (folder / "logs").mkdir()
        env = reviewer_env(
            url=self.url,
            database_url=database_url(),
            data_dir=folder / "data",
            OAUTH_POLL_INTERVAL_SECONDS="1",
        )
        endpoint = f"ssl:{self.port}:interface=127.0.0.1:privateKey={self.key}:certKey={self.cert}"
        self.process = ServerProcess(
            "reviewer-tls",
            [sys.executable, "-m", "daphne", "-e", endpoint, "reviewer.asgi:application"],
            env=env,
            log_dir=folder / "logs",
        )
        self.process.ready = (self.answers, "an answer to /.well-known/jwks.json over TLS")

    def answers(self) -> bool:
        try:
            return (
                httpx.get(
                    f"{self.url}/.well-known/jwks.json",
                    verify=ssl.create_default_context(cafile=str(self.cert)),
                    timeout=1,
                ).status_code
                == 200
            )
        except httpx.HTTPError:
            return False


@pytest.fixture(scope="module")
def tls_reviewer(django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock(), shared_signing_keys(tmp_path_factory):
        server = TLSReviewer(tmp_path_factory.mktemp("tls-reviewer"))  # its env names the shared key folder
        keys.active_key()  # one key for this process and Daphne
        server.process.start()
        try:
            server.process.wait_ready()
            yield server
        finally:
            from tests.examples.harness import stop_processes

            stop_processes([server.process.process])
            sys.stdout.write(server.process.log())


# ---------------------------------------------------------------------------------------------------
# A refund resource, by hand


class RefundResource:
    """POST /refunds {"order_id", "amount", "currency"}: without a valid token, a TAC challenge; with
    one, the token verified against Reviewer's keys, its details matched to this request's, consumed
    online with the resource's API token, then the refund runs (recorded) and the outcome reported."""

    def __init__(self, reviewer_url: str, ca: str, *, audience: str, api_token: str, key: ChallengeKey):
        self.reviewer_url, self.ca, self.audience, self.api_token, self.key = (
            reviewer_url,
            ca,
            audience,
            api_token,
            key,
        )
        self.refunds: list[dict] = []
        self.refusals: list[str] = []
        self.challenged_txns: set[str] = set()
        resource = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                detail = {"type": "refund", **{k: body[k] for k in ("order_id", "amount", "currency")}}
                scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
                if scheme != "Bearer" or not token:
                    return self.challenge(detail)
                refusal = resource.release(token, detail)
                if refusal:
                    resource.refusals.append(refusal)
                    return self.send(403, {"error": "forbidden", "reason": refusal})
                resource.refunds.append(detail)
                return self.send(200, {"refunded": detail["amount"]})

            def challenge(self, detail):
                txn, now = str(uuid.uuid4()), int(time.time())
                resource.challenged_txns.add(txn)
                challenge = resource.key.sign(
                    {
                        "iss": resource.audience,
                        "aud": resource.reviewer_url,
                        "iat": now,
                        "exp": now + 300,
                        "jti": str(uuid.uuid4()),
                        "txn": txn,
                        "authorization_details": [detail],
                        "reason": f"Refund of {detail['currency']} {detail['amount']} needs two people",
                        "act": {"sub": "agent:refund-bot"},
                    }
                )
                header = (
                    f'Bearer error="transaction_authorization_required", transaction_challenge="{challenge}"'
                )
                self.send(401, {"error": "transaction_authorization_required"}, {"WWW-Authenticate": header})

            def send(self, status, payload, headers=None):
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def release(self, token: str, detail: dict) -> str:
        """ "" when the token releases this request (and it was consumed), else why not."""
        jwks = httpx.get(
            f"{self.reviewer_url}/.well-known/jwks.json", verify=ssl.create_default_context(cafile=self.ca)
        ).json()
        try:
            kid = jwt.get_unverified_header(token)["kid"]
            key = jwt.PyJWK(next(k for k in jwks["keys"] if k["kid"] == kid))
            claims = jwt.decode(
                token, key, algorithms=["EdDSA"], audience=self.audience, issuer=self.reviewer_url
            )
        except (jwt.PyJWTError, StopIteration, KeyError) as error:
            return f"token: {error!r}"
        if claims.get("decision") != "approved" or claims.get("txn") not in self.challenged_txns:
            return "token: not an approval of a transaction challenged here"
        granted = claims.get("authorization_details") or [None]
        if rfc8785.dumps(granted[0]) != rfc8785.dumps(detail):
            return "token: approved for another operation"
        consumed = httpx.post(
            f"{self.reviewer_url}/api/v1/decisions/{claims['jti']}/consume",
            json={"rev": claims["rev"]},
            headers={"Authorization": f"Bearer {self.api_token}"},
            verify=ssl.create_default_context(cafile=self.ca),
        )
        if consumed.status_code != 200:
            return f"consume: {consumed.json()['error']['code']}"
        return ""

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def world(transactional_db, settings, tls_reviewer, tenant, requester, reviewer_a, reviewer_b):
    settings.REVIEWER_ISSUER = tls_reviewer.url  # the votes below sign their decisions in this process
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 2}]
    )
    factories.make_agent(tenant, "refund-bot", card_url="", api_token=BOT_TOKEN, push_token="bot-push")
    key, other_key = ChallengeKey(), ChallengeKey(kid="ledger-1")
    register_resource(
        tenant=tenant,
        slug="refunds-api",
        name="Refunds API",
        audience=REFUNDS,
        jwks=key.public_jwk(),
        types={"refund": "payments.refund"},
        api_token="refunds-api-secret",
    )
    register_resource(
        tenant=tenant,
        slug="ledger-api",
        name="Ledger API",
        audience="https://ledger.example.test",
        jwks=other_key.public_jwk(),
        types={"refund": "payments.refund"},
        api_token="ledger-api-secret",
    )
    ca = str(tls_reviewer.cert)
    refunds = RefundResource(tls_reviewer.url, ca, audience=REFUNDS, api_token="refunds-api-secret", key=key)
    ledger = RefundResource(
        tls_reviewer.url,
        ca,
        audience="https://ledger.example.test",
        api_token="ledger-api-secret",
        key=other_key,
    )
    try:
        yield {
            "reviewer": tls_reviewer,
            "refunds": refunds,
            "ledger": ledger,
            "reviewers": (reviewer_a, reviewer_b),
        }
    finally:
        refunds.stop()
        ledger.stop()


def approve_when_filed(reviewers) -> Proposal:
    proposal = wait_until(
        lambda: Proposal.objects.filter(state="awaiting_review").first(),
        "the proposal filed by the challenge",
        timeout=30,
    )
    for person in reviewers:
        factories.vote(proposal, person)
    return proposal


def agent_call(resource: RefundResource, reviewer: TLSReviewer, body: dict, outcome: dict):
    auth = TransactionAuthorization(
        reviewer.url,
        client_id="refund-bot",
        client_secret=BOT_TOKEN,
        verify=ssl.create_default_context(cafile=str(reviewer.cert)),
        max_wait=60,
    )

    def call():
        try:
            outcome["response"] = httpx.post(f"{resource.url}/refunds", json=body, auth=auth, timeout=90)
            outcome["token"] = (
                outcome["response"].request.headers.get("Authorization", "").removeprefix("Bearer ")
            )
        except TransactionAuthorizationError as error:
            outcome["error"] = error

    thread = threading.Thread(target=call)
    thread.start()
    return thread


REFUND = {"order_id": "1182", "amount": "740.00", "currency": "EUR"}


def test_a_protected_refund_runs_once_after_two_people_approve_and_nothing_else_runs(world):
    refunds, ledger, reviewer = world["refunds"], world["ledger"], world["reviewer"]

    direct = httpx.post(f"{refunds.url}/refunds", json=REFUND)
    assert direct.status_code == 401 and "transaction_challenge=" in direct.headers["WWW-Authenticate"]

    outcome: dict = {}
    thread = agent_call(refunds, reviewer, REFUND, outcome)
    approve_when_filed(world["reviewers"])  # the direct call's challenge was never relayed
    thread.join(timeout=90)

    assert outcome.get("response") is not None, outcome
    assert outcome["response"].status_code == 200, outcome["response"].text
    assert refunds.refunds == [{"type": "refund", **REFUND}]
    token = outcome["token"]

    replay = httpx.post(f"{refunds.url}/refunds", json=REFUND, headers={"Authorization": f"Bearer {token}"})
    changed = httpx.post(
        f"{refunds.url}/refunds",
        json={**REFUND, "amount": "7400.00"},
        headers={"Authorization": f"Bearer {token}"},
    )
    elsewhere = httpx.post(f"{ledger.url}/refunds", json=REFUND, headers={"Authorization": f"Bearer {token}"})

    assert (replay.status_code, replay.json()["reason"]) == (403, "consume: consumed")
    assert (changed.status_code, changed.json()["reason"]) == (403, "token: approved for another operation")
    assert elsewhere.status_code == 403 and "audience" in elsewhere.json()["reason"].lower()
    assert len(refunds.refunds) == 1 and ledger.refunds == []


def test_a_rejected_challenge_raises_in_the_agent_and_runs_nothing(world):
    refunds, reviewer = world["refunds"], world["reviewer"]
    outcome: dict = {}
    thread = agent_call(refunds, reviewer, REFUND, outcome)
    proposal = wait_until(
        lambda: Proposal.objects.filter(state="awaiting_review").first(), "filed", timeout=30
    )
    factories.vote(proposal, world["reviewers"][0], verdict="reject", reason="already refunded")
    thread.join(timeout=90)

    assert outcome["error"].error == "access_denied"
    assert refunds.refunds == []


# ---------------------------------------------------------------------------------------------------
# CIBA with auth0-python


def ciba_token_once_released(tokens: GetToken, auth_req_id: str) -> dict:
    """Poll the token endpoint as a CIBA client does until the tokens come (pending and slow_down are
    the only answers allowed meanwhile)."""

    def token_or_none():
        try:
            return tokens.backchannel_login(auth_req_id)
        except Auth0Error as error:
            assert error.error_code in {"authorization_pending", "slow_down"}, error
            return None

    return wait_until(token_or_none, "the CIBA token", timeout=30, interval=0.5)


def test_auth0_pythons_ciba_calls_get_an_action_approved_by_people(world, monkeypatch):
    reviewer = world["reviewer"]
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(reviewer.cert))  # requests trusts the test's certificate
    domain = f"127.0.0.1:{reviewer.port}"
    detail = {
        "type": "refund",
        "order_id": "1183",
        "amount": "620.00",
        "currency": "EUR",
        "locations": [REFUNDS],
    }

    started = BackChannelLogin(domain, "refund-bot", client_secret=BOT_TOKEN).back_channel_login(
        binding_message="Refund 1183: code K7Q2",
        login_hint="requester",
        scope="openid",
        authorization_details=[detail],
    )
    tokens = GetToken(domain, "refund-bot", client_secret=BOT_TOKEN)
    with pytest.raises(Auth0Error) as pending:
        tokens.backchannel_login(started["auth_req_id"])
    assert pending.value.error_code == "authorization_pending"
    proposal = Proposal.objects.get(state="awaiting_review")
    assert proposal.consequences["binding_message"] == "Refund 1183: code K7Q2"
    for person in world["reviewers"]:
        factories.vote(proposal, person)

    answer = ciba_token_once_released(tokens, started["auth_req_id"])

    assert answer["token_type"] == "Bearer"
    assert answer["authorization_details"] == [detail]
    claims = jwt.decode(answer["access_token"], options={"verify_signature": False})
    assert claims["aud"] == "urn:agent:refund-bot" and claims["decision"] == "approved"
    assert claims["authorization_details"] == [detail] and claims["consume"] is True
    assert jwt.decode(answer["id_token"], options={"verify_signature": False})["sub"] == "requester"


def test_a_ciba_request_for_an_unknown_principal_is_refused(world, monkeypatch):
    reviewer = world["reviewer"]
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(reviewer.cert))

    with pytest.raises(Auth0Error) as refused:
        BackChannelLogin(
            f"127.0.0.1:{reviewer.port}", "refund-bot", client_secret=BOT_TOKEN
        ).back_channel_login(
            binding_message="x",
            login_hint="nobody-here",
            scope="openid",
            authorization_details=[{"type": "refund", "order_id": "1", "amount": "1.00", "currency": "EUR"}],
        )

    assert refused.value.error_code == "unknown_user_id"
    assert Proposal.objects.count() == 0
