"""The enforcement proxy (`python -m reviewer_gate.proxy`): an upstream that knows nothing of Reviewer sees
only released requests, byte for byte as approved, never the transaction token.

`FakeReviewer` stands in for Reviewer (JWKS, consume, outcome); the upstream is a real HTTP server on
loopback that records what reaches it. The same proxy against a real Reviewer is in
tests/e2e/test_protected_api.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from reviewer_gate.proxy import ConfigError, build_app, load_config
from reviewer_gate.testing import grant_challenge

AUDIENCE = "https://payments.example"


class Upstream:
    """The API that cannot be changed: records every request that reaches it."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet test server
                return

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {name.lower(): value for name, value in self.headers.items()}
                upstream.seen.append({"path": self.path, "body": body, "headers": headers})
                payload = b'{"refunded": true}'
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> Upstream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


ROUTES_TOML = """
[resource]
audience = "{audience}"
key_file = "resource-key.pem"
intake = {intake}

[reviewer]
url = "{reviewer}"

[caller]
header = "X-Api-Key"
keys = {{ "key-of-carol" = "carol" }}

[[route]]
method = "POST"
path = "/refunds/{{order_id}}"
type = "refund"
tool = "payments.refund"
target = "{audience}/orders/{{order_id}}"
fields = {{ order_id = "path.order_id", amount = "body.amount", currency = "body.currency" }}
"""


def write_routes(tmp_path: Path, reviewer_url: str, *, intake: bool = False) -> Path:
    path = tmp_path / "routes.toml"
    path.write_text(ROUTES_TOML.format(audience=AUDIENCE, reviewer=reviewer_url, intake=str(intake).lower()))
    return path


@pytest.fixture
def upstream():
    with Upstream() as server:
        yield server


@pytest.fixture
def proxy(tmp_path, reviewer, upstream):
    config = load_config(write_routes(tmp_path, reviewer.url), environ={"REVIEWER_GATE_API_TOKEN": "tok"})
    app = build_app(config, upstream.url)

    async def send(method: str, path: str, **kwargs: Any) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=AUDIENCE) as client:
            return await client.request(method, path, **kwargs)

    yield send
    config.guard.close()


def challenge_of(response: httpx.Response) -> str:
    match = re.search(r'transaction_challenge="([^"]+)"', response.headers["www-authenticate"])
    assert match, response.headers
    return match.group(1)


# The upstream takes a JSON number: the proxy describes it by its literal text, and forwards the bytes.
BODY = b'{"amount": 40.00, "currency": "EUR"}'
CAROL = {"X-Api-Key": "key-of-carol", "Content-Type": "application/json"}


async def test_the_upstream_sees_only_the_approved_request_byte_for_byte_and_never_the_token(
    proxy, upstream, reviewer, key
):
    challenged = await proxy("POST", "/refunds/1182", content=BODY, headers=CAROL)
    assert challenged.status_code == 401 and upstream.seen == []
    challenge = challenge_of(challenged)
    details = jwt.decode(challenge, options={"verify_signature": False})["authorization_details"]
    assert details[0]["amount"] == "40.00"
    token = grant_challenge(reviewer, key, challenge)
    authorized = {**CAROL, "Authorization": f"Bearer {token}"}

    ran = await proxy("POST", "/refunds/1182", content=BODY, headers=authorized)
    replay = await proxy("POST", "/refunds/1182", content=BODY, headers=authorized)
    changed = await proxy(
        "POST", "/refunds/1182", content=BODY.replace(b"40.00", b"4000.00"), headers=authorized
    )

    assert ran.status_code == 201 and ran.json() == {"refunded": True}
    assert [seen["body"] for seen in upstream.seen] == [BODY]
    assert upstream.seen[0]["path"] == "/refunds/1182"
    assert "authorization" not in upstream.seen[0]["headers"]
    assert upstream.seen[0]["headers"]["x-api-key"] == "key-of-carol"
    jti = jwt.decode(token, options={"verify_signature": False})["jti"]
    assert reviewer.outcomes_for(jti) == ["succeeded"]
    assert replay.status_code == 401 and replay.json()["reviewer_gate_code"] == "replayed"
    assert changed.status_code == 403 and changed.json()["reviewer_gate_code"] == "wrong_operation"
    assert len(upstream.seen) == 1


async def test_a_route_the_file_does_not_list_never_reaches_the_upstream(proxy, upstream):
    response = await proxy("POST", "/payouts/1182", content=BODY, headers=CAROL)

    assert response.status_code == 403
    assert upstream.seen == []


def test_a_routes_file_without_routes_or_token_does_not_start(tmp_path, reviewer):
    routes = write_routes(tmp_path, reviewer.url)
    with pytest.raises(ConfigError, match="REVIEWER_GATE_API_TOKEN"):
        load_config(routes, environ={})
    empty = tmp_path / "empty.toml"
    empty.write_text(f'[resource]\naudience = "{AUDIENCE}"\n[reviewer]\nurl = "{reviewer.url}"\n')
    with pytest.raises(ConfigError, match="no \\[\\[route\\]\\]"):
        load_config(empty, environ={"REVIEWER_GATE_API_TOKEN": "tok"})


def test_the_command_line_refuses_a_bad_routes_file_with_its_reason(tmp_path):
    bad = tmp_path / "routes.toml"
    bad.write_text("[resource]\n")

    result = subprocess.run(  # noqa: S603 - this interpreter, fixed arguments
        [
            sys.executable,
            "-m",
            "reviewer_gate.proxy",
            "--upstream",
            "http://127.0.0.1:9",
            "--routes",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 2
    assert "resource.audience" in result.stderr


def test_the_resource_key_is_made_once_with_owner_only_permissions(tmp_path, reviewer):
    routes = write_routes(tmp_path, reviewer.url)
    first = load_config(routes, environ={"REVIEWER_GATE_API_TOKEN": "tok"})
    second = load_config(routes, environ={"REVIEWER_GATE_API_TOKEN": "tok"})

    assert first.guard.key.kid == second.guard.key.kid
    assert (tmp_path / "resource-key.pem").stat().st_mode & 0o777 == 0o600
    assert json.loads(json.dumps(first.guard.key.jwks()))["keys"][0]["crv"] == "Ed25519"


def test_the_public_jwk_for_reviewers_registration_is_printed_from_the_key_file(tmp_path):
    key_file = tmp_path / "resource-key.pem"

    printed = subprocess.run(  # noqa: S603 - this interpreter, fixed arguments
        [sys.executable, "-m", "reviewer_gate.resource", "jwk", str(key_file)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

    jwk = json.loads(printed.stdout)
    assert jwk["kty"] == "OKP" and jwk["crv"] == "Ed25519" and jwk["alg"] == "EdDSA"
    assert "d" not in jwk  # the private part stays in the file
    from reviewer_gate.resource import ResourceKey

    assert ResourceKey.from_file(key_file).kid == jwk["kid"]
