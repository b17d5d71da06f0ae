"""`reviewer_gate.tac.TransactionAuthorization` over real loopback HTTP: a resource that challenges,
and a scripted stand-in for Reviewer's transaction authorization endpoint that records what it was
sent (the real Reviewer is tests/e2e/test_tac_e2e.py). Waits are recorded, never slept."""

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import httpx
import jwt
import pytest

from reviewer_gate.tac import TransactionAuthorization, TransactionAuthorizationError, challenge_of

REVIEWER = "REVIEWER"  # replaced by the server's URL


class Loopback:
    """One server playing the resource (`/refunds`) and Reviewer (`/oauth/txn-authorization`)."""

    def __init__(self, answers: list[tuple[int, dict]]):
        self.answers = list(answers)
        self.relayed: list[dict] = []
        self.resource_calls: list[dict] = []
        self.challenge = ""
        loopback = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path == "/refunds":
                    loopback.resource_calls.append(
                        {
                            "authorization": self.headers.get("Authorization"),
                            "accept": self.headers.get("Accept-Txn-Challenge"),
                            "body": body,
                        }
                    )
                    if self.headers.get("Authorization") == "Bearer the-token":
                        return self.send(200, {"refunded": True})
                    return self.send(
                        401,
                        {"error": "approval required"},
                        {
                            "WWW-Authenticate": 'Bearer error="transaction_authorization_required", '
                            'error_description="Approval is required", '
                            f'transaction_challenge="{loopback.challenge}"'
                        },
                    )
                loopback.relayed.append(
                    {
                        "form": {k: v[0] for k, v in parse_qs(body.decode()).items()},
                        "authorization": self.headers.get("Authorization"),
                    }
                )
                status, answer = loopback.answers.pop(0)
                self.send(status, answer)

            def send(self, status, body, headers=None):
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.challenge = jwt.encode(
            {
                "iss": "https://refunds.example.test",
                "aud": self.url,
                "exp": int(time.time()) + 300,
                "txn": "t-1",
            },
            "a resource key stand-in, 32 bytes or more",
            algorithm="HS256",  # what the agent relays is opaque to it; Reviewer checks the signature
            headers={"typ": "txn-authz-challenge+jwt"},
        )
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def loopback(request):
    server = Loopback(request.param)
    yield server
    server.stop()


def auth_for(server: Loopback, waits: list) -> TransactionAuthorization:
    return TransactionAuthorization(
        server.url, client_id="refund-bot", client_secret="s3cret", sleep=waits.append
    )


TOKEN = {"access_token": "the-token", "token_type": "Bearer", "expires_in": 60, "authorization_details": []}
PENDING = (400, {"error": "authorization_pending"})


@pytest.mark.parametrize(
    "loopback",
    [
        [
            (200, {"transaction_authorization_id": "ta-1", "expires_in": 600, "interval": 2}),
            PENDING,
            (400, {"error": "slow_down"}),
            PENDING,
            (200, TOKEN),
        ]
    ],
    indirect=True,
)
def test_a_challenge_is_relayed_unchanged_polled_and_the_request_retried_with_the_token(loopback):
    waits: list[float] = []

    response = httpx.post(
        f"{loopback.url}/refunds", json={"amount": "740.00"}, auth=auth_for(loopback, waits)
    )

    assert response.status_code == 200 and response.json() == {"refunded": True}
    assert loopback.relayed[0]["form"] == {"transaction_challenge": loopback.challenge}
    expected_basic = "Basic " + base64.b64encode(b"refund-bot:s3cret").decode()
    assert {call["authorization"] for call in loopback.relayed} == {expected_basic}
    assert [call["form"] for call in loopback.relayed[1:]] == [{"transaction_authorization_id": "ta-1"}] * 4
    assert waits == [2.0, 2.0, 7.0, 7.0]  # the interval, then 5 s more after slow_down
    assert [call["accept"] for call in loopback.resource_calls] == ["?1", "?1"]
    assert loopback.resource_calls[1]["authorization"] == "Bearer the-token"
    assert loopback.resource_calls[0]["body"] == loopback.resource_calls[1]["body"]


@pytest.mark.parametrize("loopback", [[(200, TOKEN)]], indirect=True)
def test_a_token_in_the_first_answer_is_used_at_once(loopback):
    waits: list[float] = []

    response = httpx.post(f"{loopback.url}/refunds", json={}, auth=auth_for(loopback, waits))

    assert response.status_code == 200 and waits == []


@pytest.mark.parametrize(
    "loopback",
    [
        [
            (200, {"transaction_authorization_id": "ta-1", "expires_in": 600, "interval": 1}),
            (400, {"error": "access_denied", "error_description": "customer already refunded"}),
        ]
    ],
    indirect=True,
)
def test_a_denial_raises_and_the_request_is_not_retried(loopback):
    with pytest.raises(TransactionAuthorizationError) as raised:
        httpx.post(f"{loopback.url}/refunds", json={}, auth=auth_for(loopback, []))

    assert (raised.value.error, raised.value.description) == ("access_denied", "customer already refunded")
    assert len(loopback.resource_calls) == 1


@pytest.mark.parametrize(
    "loopback",
    [[(200, {"transaction_authorization_id": "ta-1", "expires_in": 3, "interval": 2}), PENDING]],
    indirect=True,
)
def test_waiting_stops_at_the_transactions_expiry(loopback):
    with pytest.raises(TransactionAuthorizationError) as raised:
        httpx.post(f"{loopback.url}/refunds", json={}, auth=auth_for(loopback, []))

    assert raised.value.error == "expired_token"


@pytest.mark.parametrize(
    "loopback",
    [[(200, {"transaction_authorization_id": "ta-1", "expires_in": 600, "interval": 1}), (200, TOKEN)]],
    indirect=True,
)
async def test_the_async_flow_does_the_same(loopback):
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    auth = TransactionAuthorization(
        loopback.url, client_id="refund-bot", client_secret="s3cret", async_sleep=record
    )
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{loopback.url}/refunds", json={"amount": "1.00"}, auth=auth)

    assert response.status_code == 200 and waits == [1.0]


@pytest.mark.parametrize("loopback", [[]], indirect=True)
def test_a_challenge_for_another_authorization_server_is_not_relayed(loopback):
    auth = TransactionAuthorization("https://another-reviewer.example", client_id="a", client_secret="b")

    with pytest.raises(TransactionAuthorizationError) as raised:
        httpx.post(f"{loopback.url}/refunds", json={}, auth=auth)

    assert raised.value.error == "invalid_request" and loopback.relayed == []


def test_only_a_401_with_the_transaction_error_carries_a_challenge():
    header = 'Bearer realm="x", error="transaction_authorization_required", transaction_challenge="a.b.c"'

    assert challenge_of(httpx.Response(401, headers={"WWW-Authenticate": header})) == "a.b.c"
    assert challenge_of(httpx.Response(403, headers={"WWW-Authenticate": header})) is None
    assert (
        challenge_of(httpx.Response(401, headers={"WWW-Authenticate": 'Bearer error="invalid_token"'}))
        is None
    )
    unquoted = "Bearer error=transaction_authorization_required, transaction_challenge=a.b.c"
    assert challenge_of(httpx.Response(401, headers={"WWW-Authenticate": unquoted})) == "a.b.c"
