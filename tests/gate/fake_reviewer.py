"""Test doubles for Reviewer's side of the gate: a real Ed25519 signing key, decision claims shaped like
approvals/signing.py's, and a tiny HTTP server with Reviewer's agent-facing endpoints.

No Django: these tests exercise gate.py and the example agent exactly as a third-party agent would.
"""

import base64
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

TOKEN_TYPE = "approval-decision+jwt"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class ReviewerKey:
    kid: str = field(default_factory=lambda: f"ed25519-test-{uuid.uuid4().hex[:8]}")
    private_key: Ed25519PrivateKey = field(default_factory=Ed25519PrivateKey.generate)

    def public_raw(self) -> bytes:
        return self.private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )

    def jwk(self) -> dict:
        return {
            "kty": "OKP",
            "crv": "Ed25519",
            "x": b64url(self.public_raw()),
            "kid": self.kid,
            "alg": "EdDSA",
            "use": "sig",
        }

    def sign(self, claims: dict, *, kid: str | None = None, typ: str = TOKEN_TYPE) -> str:
        """Sign as approvals/signing.py does: EdDSA, headers kid and typ."""
        return jwt.encode(
            claims, self.private_key, algorithm="EdDSA", headers={"kid": kid or self.kid, "typ": typ}
        )


def decision_claims(
    *,
    issuer: str,
    audience: str,
    task_id: str,
    request_id: str,
    action_digest: str,
    decision: str = "approved",
    context_id: str = "ctx-1",
    consume: bool = True,
    reason: str = "",
    lifetime: int = 600,
    now: int | None = None,
    **overrides,
) -> dict:
    """The claims of DESIGN.md "A2A contract" (the same keys approvals/signing.py writes)."""
    now = int(time.time()) if now is None else now
    claims = {
        "iss": issuer,
        "aud": audience,
        "sub": task_id,
        "jti": str(uuid.uuid4()),
        "iat": now,
        "nbf": now,
        "exp": now + lifetime,
        "context_id": context_id,
        "request_id": request_id,
        "proposal_id": str(uuid.uuid4()),
        "action_digest": action_digest,
        "decision": decision,
        "reason": reason,
        "approvers": [
            {
                "sub": "user:7",
                "name": "Rita Reviewer",
                "group": "finance",
                "auth": {"method": "totp", "at": now},
            }
        ],
        "quorum": {"required": [{"group": "finance", "count": 1}], "approved_by": ["user:7"]},
        "policy": {"id": "refunds", "version": 3},
        "tenant": "acme",
        "rev": 2,
        "consume": consume,
    }
    claims.update(overrides)
    return claims


_DECISION_PATH = re.compile(r"^/api/v1/decisions/([^/]+)/(consume|outcome)$")


class FakeReviewer:
    """Reviewer's agent-facing HTTP surface on a loopback port, recording every call.

    - GET /.well-known/jwks.json (counted in `jwks_fetches`)
    - POST /api/v1/proposals → 201
    - POST /api/v1/decisions/<jti>/consume → 200, or what `consume_answers[jti]` says
    - POST /api/v1/decisions/<jti>/outcome → 200
    - POST /a2a/push/<slug>/ → 204 (A2A push notifications, with their X-A2A-Notification-Token)
    """

    def __init__(self, keys: list[ReviewerKey]):
        self.keys = list(keys)
        self.lock = threading.Lock()
        self.jwks_fetches = 0
        self.proposals: list[dict] = []
        self.consumes: list[dict] = []
        self.outcomes: list[dict] = []
        self.pushes: list[dict] = []
        self.consume_answers: dict[str, tuple[int, dict]] = {}
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-reviewer", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeReviewer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)

    def outcomes_for(self, jti: str) -> list[str]:
        with self.lock:
            return [call["body"]["status"] for call in self.outcomes if call["jti"] == jti]

    def consumes_for(self, jti: str) -> list[dict]:
        with self.lock:
            return [call for call in self.consumes if call["jti"] == jti]

    def proposals_for(self, task_id: str) -> list[dict]:
        with self.lock:
            return [call["body"] for call in self.proposals if call["body"].get("task_id") == task_id]

    def _handler(self):
        reviewer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format, *args):  # noqa: A002 - quiet test server
                return

            def _send(self, status: int, body: dict) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):  # noqa: N802 - http.server's naming
                if self.path == "/.well-known/jwks.json":
                    with reviewer.lock:
                        reviewer.jwks_fetches += 1
                        keys = [key.jwk() for key in reviewer.keys]
                    self._send(200, {"keys": keys})
                else:
                    self._send(404, {"error": {"code": "not_found", "message": self.path}})

            def do_POST(self):  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                call = {"body": body, "authorization": self.headers.get("Authorization")}
                if self.path.startswith("/a2a/push/"):
                    call["token"] = self.headers.get("X-A2A-Notification-Token")
                    with reviewer.lock:
                        reviewer.pushes.append(call)
                    self.send_response(204)
                    self.end_headers()
                    return
                if self.path == "/api/v1/proposals":
                    with reviewer.lock:
                        reviewer.proposals.append(call)
                    self._send(
                        201,
                        {
                            "proposal_id": str(uuid.uuid4()),
                            "state": "awaiting_review",
                            "status_url": "/api/v1/proposals/x",
                        },
                    )
                    return
                match = _DECISION_PATH.match(self.path)
                if not match:
                    self._send(404, {"error": {"code": "not_found", "message": self.path}})
                    return
                jti, verb = match.groups()
                call["jti"] = jti
                with reviewer.lock:
                    if verb == "consume":
                        reviewer.consumes.append(call)
                        status, answer = reviewer.consume_answers.get(jti, (200, {"state": "executing"}))
                    else:
                        reviewer.outcomes.append(call)
                        status, answer = 200, {"state": body.get("status")}
                self._send(status, answer)

        return Handler
