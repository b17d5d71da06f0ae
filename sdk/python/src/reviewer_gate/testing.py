"""Test doubles for Reviewer's side of the gate, for your agent's tests: a real Ed25519 signing key,
decision claims shaped like Reviewer's, and a tiny HTTP server with Reviewer's agent-facing endpoints.

No Django, no Reviewer: tests drive the gate and an agent exactly as a deployed Reviewer would.
"""

import base64
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from reviewer_gate.client import preference_names
from reviewer_gate.decision import action_digest, manifest_digest

TOKEN_TYPE = "approval-decision+jwt"  # noqa: S105 - a JOSE typ value, not a secret


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

    def jwk(self) -> dict[str, Any]:
        return {
            "kty": "OKP",
            "crv": "Ed25519",
            "x": b64url(self.public_raw()),
            "kid": self.kid,
            "alg": "EdDSA",
            "use": "sig",
        }

    def sign(self, claims: dict[str, Any], *, kid: str | None = None, typ: str = TOKEN_TYPE) -> str:
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
    **overrides: Any,
) -> dict[str, Any]:
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
_PULL_PATH = re.compile(r"^/api/v1/proposals/([^/]+)/decision$")


class FakeReviewer:
    """Reviewer's agent-facing HTTP surface on a loopback port, recording every call.

    - GET /.well-known/jwks.json (counted in `jwks_fetches`)
    - POST /api/v1/proposals → 201 with a new proposal_id (200 and the same id for a known request);
      with `token` set when `intake_decision(body)` returns one (policy deciding at intake:
      `decide_at_intake(...)`), `null` otherwise
    - GET /api/v1/proposals/<id>/decision?wait=N → {"token", "state"}: what `decide(...)` or `close(...)`
      set, waiting up to N seconds for it (the long poll)
      (`Prefer: consume`: an approval decided at intake is answered `executing`, consumed, with
      `Preference-Applied: consume`, unless `consume_at_intake` is False; never on a replay)
    - POST /api/v1/decisions/<jti>/consume → 200, or what `consume_answers[jti]` says
    - POST /api/v1/decisions/<jti>/outcome → 200
    - POST /api/v1/batches → 201 with one proposal per member (each recorded in `proposals` as a
      submission of its own, `{"task_id", "context_id", "request": member}`, and decided at intake as
      one would be), 200 for a known task and batch id; 400 `manifest_mismatch` when the digest is not
      the members', or `batch_refusal` (code, message) when set, as Reviewer refuses a batch
    - POST /a2a/push/<slug>/ → 204 (A2A push notifications, with their X-A2A-Notification-Token)
    """

    def __init__(self, keys: list[ReviewerKey]):
        self.keys = list(keys)
        self.lock = threading.Lock()
        self.jwks_fetches = 0
        self.proposals: list[dict[str, Any]] = []
        self.consumes: list[dict[str, Any]] = []
        self.outcomes: list[dict[str, Any]] = []
        self.pushes: list[dict[str, Any]] = []
        self.batches: list[dict[str, Any]] = []  # the calls of POST /api/v1/batches
        self.batch_refusal: tuple[str, str] | None = None  # (code, message): refuse every batch
        self.consume_answers: dict[str, tuple[int, dict[str, Any]]] = {}
        self.pulls: list[str] = []
        self.unavailable_answers = 0  # answer this many next API calls with 503 (retry tests)
        # ... with 503 "overloaded" and Retry-After, as Reviewer's concurrency limit refuses a request
        self.overloaded_answers = 0
        # ... with 429 and Retry-After, as Reviewer's intake quotas refuse a request (throttle(...))
        self.throttled_answers: list[tuple[str, int]] = []
        self._outcome_of: dict[str, dict[str, Any]] = {}  # proposal_id -> {"token", "state"}
        self._proposal_ids: dict[tuple[str, str], str] = {}  # (task_id, request_id) -> proposal_id
        self._changed = threading.Condition(self.lock)
        # body -> (token, state) or None: what policy decides at intake (decide_at_intake)
        self.intake_decision: Callable[[dict[str, Any]], tuple[str, str] | None] | None = None
        # Honour `Prefer: consume` as Reviewer does (an approval decided at intake is answered consumed,
        # `executing`, with Preference-Applied); False answers as a Reviewer that predates it.
        self.consume_at_intake = True
        self.consumed_at_intake: list[str] = []  # the proposal ids answered consumed
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-reviewer", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        assert isinstance(host, str)  # an AF_INET server's address
        return f"http://{host}:{port}"

    def start(self) -> "FakeReviewer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)

    def throttle(self, code: str = "rate_limited", retry_after: int = 30, count: int = 1) -> None:
        """Answer the next `count` API calls with 429 `code` and `Retry-After: retry_after`."""
        with self.lock:
            self.throttled_answers.extend([(code, retry_after)] * count)

    def outcomes_for(self, jti: str) -> list[str]:
        with self.lock:
            return [call["body"]["status"] for call in self.outcomes if call["jti"] == jti]

    def consumes_for(self, jti: str) -> list[dict[str, Any]]:
        with self.lock:
            return [call for call in self.consumes if call["jti"] == jti]

    def decide(self, proposal_id: str, token: str, state: str = "approved") -> None:
        """Publish the signed decision of a proposal; a waiting long poll answers at once."""
        with self._changed:
            self._outcome_of[proposal_id] = {"token": token, "state": state}
            self._changed.notify_all()

    def close(self, proposal_id: str, state: str) -> None:
        """End a proposal without a decision ("expired", "cancelled", ...)."""
        with self._changed:
            self._outcome_of[proposal_id] = {"token": None, "state": state}
            self._changed.notify_all()

    def token_of(self, proposal_id: str) -> str | None:
        with self.lock:
            return (self._outcome_of.get(proposal_id) or {}).get("token")

    def proposal_id_of(self, task_id: str) -> str | None:
        with self.lock:
            for (task, _request), proposal_id in self._proposal_ids.items():
                if task == task_id:
                    return proposal_id
        return None

    def _pull(self, proposal_id: str, wait: float) -> dict[str, Any]:
        deadline = time.monotonic() + wait
        with self._changed:
            self.pulls.append(proposal_id)
            while proposal_id not in self._outcome_of and time.monotonic() < deadline:
                self._changed.wait(timeout=deadline - time.monotonic())
            return dict(self._outcome_of.get(proposal_id) or {"token": None, "state": "awaiting_review"})

    def proposal_id_for(self, task_id: str, request_id: str) -> str | None:
        """The proposal of one request (a batch's members share their task)."""
        with self.lock:
            return self._proposal_ids.get((task_id, request_id))

    def _take(self, body: dict[str, Any], call: dict[str, Any]) -> tuple[bool, str, dict[str, Any]]:
        """Record one submitted request (under the lock): (known before, proposal id, its outcome)."""
        key = (str(body.get("task_id")), str((body.get("request") or {}).get("request_id")))
        self.proposals.append({**call, "body": body})
        known = key in self._proposal_ids
        proposal_id = self._proposal_ids.setdefault(key, str(uuid.uuid4()))
        decided = self.intake_decision(body) if self.intake_decision else None
        if decided and not known:
            token, state = decided
            applied = (
                state == "allowed"
                and self.consume_at_intake
                and "consume" in preference_names(call.get("prefer") or "")
            )
            if applied:
                state = "executing"
                self.consumed_at_intake.append(proposal_id)
            self._outcome_of[proposal_id] = {"token": token, "state": state}
            return known, proposal_id, {**self._outcome_of[proposal_id], "applied": applied}
        return known, proposal_id, self._outcome_of.get(proposal_id) or {}

    def _take_batch(self, body: dict[str, Any], call: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        members = list(body.get("members") or [])
        computed = manifest_digest([str(member.get("action_digest")) for member in members])
        with self.lock:
            self.batches.append(call)
            if self.batch_refusal is not None:
                code, message = self.batch_refusal
                return 400, {"error": {"code": code, "message": message, "field": None}}
            if computed != body.get("manifest_digest"):
                message = f"the manifest digest is not the members'; Reviewer computed {computed}"
                return 400, {"error": {"code": "manifest_mismatch", "message": message, "field": None}}
            answers, known_batch = [], True
            for position, member in enumerate(members):
                submission = {"task_id": body.get("task_id"), "context_id": body.get("context_id", "")}
                known, proposal_id, outcome = self._take({**submission, "request": member}, call)
                known_batch = known_batch and known
                answers.append(
                    {
                        "position": position,
                        "request_id": member.get("request_id"),
                        "proposal_id": proposal_id,
                        "action_digest": member.get("action_digest"),
                        "standing": "in",
                        "state": outcome.get("state", "awaiting_review"),
                        "token": outcome.get("token"),
                    }
                )
        answer = {
            "batch": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{body.get('task_id')}/{body.get('batch_id')}")),
            "batch_id": body.get("batch_id"),
            "task_id": body.get("task_id"),
            "manifest_digest": computed,
            "submitted_digest": body.get("manifest_digest"),
            "revoked_at": None,
            "members": answers,
        }
        return 200 if known_batch else 201, answer

    def proposals_for(self, task_id: str) -> list[dict[str, Any]]:
        with self.lock:
            return [call["body"] for call in self.proposals if call["body"].get("task_id") == task_id]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        reviewer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet test server
                return

            def _send(self, status: int, body: dict[str, Any], headers: dict[str, Any] | None = None) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _unavailable(self) -> bool:
                with reviewer.lock:
                    throttled = reviewer.throttled_answers.pop(0) if reviewer.throttled_answers else None
                if throttled is not None:
                    code, retry_after = throttled
                    message = f"over a quota; retry after {retry_after} s"
                    self._send(
                        429,
                        {"error": {"code": code, "message": message, "field": None}},
                        {"Retry-After": str(retry_after)},
                    )
                    return True
                with reviewer.lock:
                    overloaded = reviewer.overloaded_answers > 0
                    if overloaded:
                        reviewer.overloaded_answers -= 1
                    elif reviewer.unavailable_answers > 0:
                        reviewer.unavailable_answers -= 1
                    else:
                        return False
                if overloaded:
                    body = {"error": {"code": "overloaded", "message": "at capacity", "field": None}}
                    self._send(503, body, {"Retry-After": "0"})
                else:
                    self._send(503, {"error": {"code": "unavailable", "message": "try again"}})
                return True

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                url = urlsplit(self.path)
                pull = _PULL_PATH.match(url.path)
                if pull and not self._unavailable():
                    wait = float((parse_qs(url.query).get("wait") or ["0"])[0])
                    self._send(200, reviewer._pull(pull.group(1), min(wait, 60)))
                elif pull:
                    return
                elif self.path == "/.well-known/jwks.json":
                    with reviewer.lock:
                        reviewer.jwks_fetches += 1
                        keys = [key.jwk() for key in reviewer.keys]
                    self._send(200, {"keys": keys})
                else:
                    self._send(404, {"error": {"code": "not_found", "message": self.path}})

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                call = {
                    "body": body,
                    "authorization": self.headers.get("Authorization"),
                    "prefer": self.headers.get("Prefer"),
                    "traceparent": self.headers.get("traceparent"),
                }
                if self.path.startswith("/a2a/push/"):
                    call["token"] = self.headers.get("X-A2A-Notification-Token")
                    with reviewer.lock:
                        reviewer.pushes.append(call)
                    self.send_response(204)
                    self.end_headers()
                    return
                if self._unavailable():
                    return
                if self.path == "/api/v1/batches":
                    self._send(*reviewer._take_batch(body, call))
                    return
                if self.path == "/api/v1/proposals":
                    with reviewer.lock:
                        known, proposal_id, outcome = reviewer._take(body, call)
                    self._send(
                        200 if known else 201,
                        {
                            "proposal_id": proposal_id,
                            "state": outcome.get("state", "awaiting_review"),
                            "status_url": f"/api/v1/proposals/{proposal_id}",
                            "token": outcome.get("token"),
                        },
                        {"Preference-Applied": "consume"} if outcome.get("applied") else None,
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


def _claims_for(
    reviewer: "FakeReviewer", body: dict[str, Any], *, audience: str, decision: str, **overrides: Any
) -> dict[str, Any]:
    """Claims bound to a submitted body; an approval ends no later than the request's own expires_at."""
    binding = {
        "task_id": body["task_id"],
        "request_id": body["request"]["request_id"],
        "action_digest": body["request"]["action_digest"],
        "context_id": body["context_id"],
        "decision": decision,
    }
    claims = decision_claims(issuer=reviewer.url, audience=audience, **{**binding, **overrides})
    if "expires_at" in body["request"]:
        deadline = datetime.fromisoformat(body["request"]["expires_at"].replace("Z", "+00:00"))
        claims["exp"] = min(claims["exp"], int(deadline.timestamp()))
    return claims


def decide_at_intake(
    reviewer: "FakeReviewer",
    key: "ReviewerKey",
    *,
    audience: str,
    decision: str = "approved",
    **overrides: Any,
) -> None:
    """Policy deciding at intake: every new proposal's answer carries its signed decision (`approved`
    is Reviewer's state `allowed`, `rejected` is `denied`), as Reviewer answers when a policy allows or
    denies. `overrides` replace claims."""

    def decide(body: dict[str, Any]) -> tuple[str, str]:
        claims = _claims_for(reviewer, body, audience=audience, decision=decision, **overrides)
        return key.sign(claims), "allowed" if decision == "approved" else "denied"

    reviewer.intake_decision = decide


def decide_next_proposal(
    reviewer: "FakeReviewer",
    key: "ReviewerKey",
    *,
    audience: str,
    decision: str = "approved",
    close: str | None = None,
    edit: dict[str, Any] | None = None,
    seen: int | None = None,
    **overrides: Any,
) -> threading.Thread:
    """A reviewer in another thread: waits for the next proposal (after `seen` of them; default: those
    recorded now), then signs a decision bound to it, or closes it (`close="expired"`, ...). As Reviewer
    does, an approval ends no later than the request's own `expires_at`. `edit`: the reviewer changed
    the action to this one, so the decision answers a new request that replaces the asked one and
    carries the edited action and its digest. `overrides` replace claims."""
    seen = len(reviewer.proposals) if seen is None else seen
    ready = threading.Event()

    def run() -> None:
        while len(reviewer.proposals) <= seen:
            ready.wait(0.01)  # bounded poll of the fake's record
        body = reviewer.proposals[-1]["body"]
        proposal_id = reviewer.proposal_id_of(body["task_id"])
        if proposal_id is None:
            raise AssertionError(f"no proposal recorded for task {body['task_id']!r}")
        if close:
            reviewer.close(proposal_id, close)
            return
        edited: dict[str, Any] = {}
        if edit is not None:
            asked = body["request"]["request_id"]
            edited = {
                "request_id": asked + ".edit",
                "replaces": [asked],
                "action": edit,
                "action_digest": action_digest(edit),
            }
        claims = _claims_for(reviewer, body, audience=audience, decision=decision, **{**edited, **overrides})
        reviewer.decide(proposal_id, key.sign(claims))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def grant_challenge(
    reviewer: "FakeReviewer",
    key: "ReviewerKey",
    challenge: str,
    *,
    decision: str = "approved",
    **overrides: Any,
) -> str:
    """Reviewer's answer to a resource's transaction challenge, as its TAC endpoint gives it once people
    approved: a decision token whose audience is the challenge's issuer (the resource), carrying the
    challenge's `txn` and `authorization_details`, to be consumed online. A test double: the challenge
    is read without checking its signature (a resource's own tests check that separately).
    `overrides` replace claims (another audience, another txn, ...)."""
    challenged = jwt.decode(challenge, options={"verify_signature": False})
    # As Reviewer files it: the detail verbatim as the arguments of the tool its type maps to (here the
    # type itself stands in for the registered tool), the txn as the task, `tac-<jti>` as the request.
    detail = challenged["authorization_details"][0]
    action = {"tool": detail["type"], "arguments": detail}
    claims = decision_claims(
        issuer=reviewer.url,
        audience=challenged["iss"],
        task_id=challenged["txn"],
        request_id=f"tac-{challenged['jti']}",
        action_digest=action_digest(action),
        decision=decision,
        consume=True,
        action=action,
        txn=challenged["txn"],
        authorization_details=challenged["authorization_details"],
    )
    if "act" in challenged:
        claims["act"] = challenged["act"]
    claims.update(overrides)
    return key.sign(claims)
