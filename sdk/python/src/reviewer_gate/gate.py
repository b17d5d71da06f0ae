"""Agent-side verifier for Reviewer's signed approval decisions (no Django).

An agent that asks Reviewer for approval imports this module from the `reviewer-gate` distribution
(`pip install reviewer-gate`; `from reviewer_gate import gate`). It and the three modules it is made of
(`decision`: the token's constants, claims and A2A helpers; `keys`: the key sources; `used_stores`:
single use) import only the standard library, PyJWT, cryptography, httpx and rfc8785, never Django or
Reviewer, so the four can also be vendored together. Every name below is importable from here.

The flow inside an a2a-sdk `AgentExecutor` (see examples/README.md for a complete walkthrough):

1. Ask. Build the action, `digest = action_digest(action)`, persist (task_id, request_id, action,
   digest), then park the task in TASK_STATE_AUTH_REQUIRED with a status message whose metadata is
   `approval_request_metadata(request)`.
2. Wait. Reviewer continues the task with a message whose metadata carries the decision token:
   `token = decision_token_from_metadata(MessageToDict(context.message.metadata))`.
   Read `context.message.metadata`, not `context.metadata` (that is the request's metadata).
3. Verify. `decision = gate.verify(token, task_id=..., request_id=..., action_digest=...)` with the
   values the agent persisted in step 1, never values taken from the continuation message.
4. Act only on `decision.decision == "approved"`. A token whose decision is `rejected` or
   `needs_info` verifies too (so the agent learns, with proof, that Reviewer said no or asked a
   question), but it must never lead to the side effect.
5. Consume. If `decision.consume` is true, call `gate.consume(decision)` right before the side
   effect; it raises `GateError` unless Reviewer moved the decision to executing (fail closed).
6. Act once, with `decision.jti` as the downstream idempotency key, then
   `gate.report_outcome(decision, "succeeded" | "failed" | "unknown", transaction_id=...)`.

`verify`, `consume` and `report_outcome` are blocking (network and SQLite I/O): from asyncio code call
them through `asyncio.to_thread`. A Gate keeps one HTTP client (a connection pool, one TLS context) for
its calls to Reviewer, shared by threads: a consume does not pay for a new TLS context and connection.

What `verify` checks, in this order, so that a forged or altered token is refused before its `jti` is
burned:

- the JOSE header: `alg` in ALGORITHMS (EdDSA only: `none`, HS*, RS* and the rest are refused),
  `typ` equal to TOKEN_TYPE, a `kid` that the key source knows (a JWKS source refreshes once on an
  unknown kid, then refuses);
- the Ed25519 signature;
- `iss`, `aud`, and the time claims `exp`, `nbf`, `iat` with `leeway_seconds` of clock skew;
- `tenant`, when the gate is given the agent's own tenant (`Gate(..., tenant="acme")`): a decision
  signed under another tenant's policy is refused (`wrong_tenant`), even for this audience;
- `policy`: an object `{id, version}` (a string and an integer; the tenant default is
  `{"id": "tenant-default", "version": 1}`), and `policies`, when present, a list of such objects that
  includes it; a token without a policy object is malformed;
- for an approval, the request's own deadline when the agent passes `expires_at` (the `expires_at` it
  put in its request): refused once it has passed, and refused if the token's `exp` outlives it;
- `sub` (the task id), `request_id`, `action_digest` (and `context_id` when given) equal to what the
  agent asked for; `decision` one of DECISIONS. One exception: when a reviewer edited the request,
  the decision names a new request whose `replaces` claim lists the one the agent asked for, and
  carries the edited `action`, which must hash to `action_digest`. Then `decision.edited` is True and
  the agent must execute `decision.action` (after checking it is an action it can perform), never
  its original one;
- last, single use: `used_store.claim(jti, exp)` must return True (first time this jti is seen).

Public API:

    EXTENSION_URI, TOKEN_TYPE, ALGORITHMS, DECISIONS
    GateError(code, message)                       .code / .message
    VerifiedDecision                               frozen dataclass; .approved is decision == "approved"
    KeySource                                      Protocol: key_for(kid) -> Ed25519PublicKey
    StaticKeySource(jwks)                          keys from a JWKS dict
    JWKSKeySource(jwks_url, *, cache_seconds=300, timeout=5, min_refresh_seconds=10, fetch=None)
        .close() -> None                           closes the HTTP client it keeps for its refreshes
    UsedDecisionStore                              Protocol: claim(jti, expires_at) -> bool
    MemoryUsedStore()                              one process only
    SQLiteUsedStore(path)                          shared by processes and threads on one file
    Gate(*, issuer, audience, keys, used_store, reviewer_url=None, api_token=None,
         leeway_seconds=30, http_timeout=5, tenant=None)
        .verify(token, *, task_id, request_id, action_digest, context_id=None, expires_at=None)
                                                   -> VerifiedDecision; expires_at: the request's own
                                                   deadline (datetime, RFC 3339 string or epoch seconds)
        .verify_transaction(token, *, txn, authorization_details) -> VerifiedDecision
                                                   a protected resource's check of a transaction token
                                                   (see reviewer_gate.resource)
        .consume(decision) -> None                 raises GateError when the agent must not act
        .report_outcome(decision, status, *, transaction_id=None, detail=None) -> bool
        .close() -> None                           closes its kept-alive HTTP connections (and its
                                                   key source's, when it has a close())
    decision_token_from_metadata(metadata) -> str | None
    action_digest(action) -> str
    approval_request_metadata(request) -> dict[str, Any]

GateError codes: malformed, bad_algorithm, bad_type, unknown_kid, keys_unavailable, bad_signature,
expired, not_yet_valid, wrong_issuer, wrong_audience, wrong_tenant, missing_claim, bad_claim, wrong_task,
wrong_context, wrong_request, wrong_digest, bad_decision, bad_policy, request_expired, replayed,
wrong_txn, wrong_operation (verify_transaction),
not_configured, consume_refused:<code> (Reviewer's 409 error code, or http_<status> for another refusal),
reviewer_unreachable.
"""

import logging
import threading
import time
from dataclasses import replace
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from reviewer_gate.decision import (
    ALGORITHMS,
    DECISIONS,
    EXTENSION_URI,
    REQUIRED_CLAIMS,
    TOKEN_TYPE,
    GateError,
    VerifiedDecision,
    action_digest,
    approval_request_metadata,
    check_policy,
    check_request_deadline,
    check_transaction,
    decision_from_claims,
    decision_token_from_metadata,
    epoch_seconds,
    manifest_digest,
)
from reviewer_gate.keys import JWKSKeySource, KeySource, StaticKeySource
from reviewer_gate.tracing import trace_headers
from reviewer_gate.used_stores import MemoryUsedStore, SQLiteUsedStore, UsedDecisionStore

__all__ = [
    "ALGORITHMS",
    "DECISIONS",
    "EXTENSION_URI",
    "REQUIRED_CLAIMS",
    "TOKEN_TYPE",
    "Gate",
    "GateError",
    "JWKSKeySource",
    "KeptAliveClient",
    "KeySource",
    "MemoryUsedStore",
    "SQLiteUsedStore",
    "StaticKeySource",
    "UsedDecisionStore",
    "VerifiedDecision",
    "action_digest",
    "approval_request_metadata",
    "decision_token_from_metadata",
    "manifest_digest",
]

logger = logging.getLogger(__name__)

_digest_of = action_digest  # Gate methods take a parameter named action_digest


# PyJWT's exceptions, most specific first (several inherit from one another).
_JWT_ERRORS: list[tuple[type[Exception], str]] = [
    (jwt.ExpiredSignatureError, "expired"),
    (jwt.ImmatureSignatureError, "not_yet_valid"),
    (jwt.InvalidAudienceError, "wrong_audience"),
    (jwt.InvalidIssuerError, "wrong_issuer"),
    (jwt.MissingRequiredClaimError, "missing_claim"),
    (jwt.InvalidAlgorithmError, "bad_algorithm"),
    (jwt.InvalidSignatureError, "bad_signature"),
    (jwt.DecodeError, "malformed"),
    (jwt.InvalidTokenError, "bad_claim"),
]


def _gate_error_from_jwt(error: jwt.InvalidTokenError) -> GateError:
    for error_type, code in _JWT_ERRORS:
        if isinstance(error, error_type):
            return GateError(code, str(error) or code)
    return GateError("bad_claim", str(error))


class KeptAliveClient:
    """One httpx.Client made on first use and shared by threads: a connection pool and one TLS context
    (a new client per call costs a TLS context, tens of milliseconds). close() drops it; the next call
    opens a new one."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def get(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(timeout=self.timeout)
            return self._client

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


class Gate:
    """Verifies Reviewer's decisions for one agent (one audience) and talks back to Reviewer."""

    def __init__(
        self,
        *,
        issuer: str,
        audience: str,
        keys: KeySource,
        used_store: UsedDecisionStore,
        reviewer_url: str | None = None,
        api_token: str | None = None,
        leeway_seconds: float = 30,
        http_timeout: float = 5,
        tenant: str | None = None,
    ):
        # PyJWT skips the iss (and aud) check when given None: a gate without them would accept
        # another issuer's tokens, so it refuses to exist instead.
        for name, value in (("issuer", issuer), ("audience", audience)):
            if not isinstance(value, str) or not value:
                raise GateError("not_configured", f"the gate needs its {name} (a non-empty string)")
        if tenant is not None and (not isinstance(tenant, str) or not tenant):
            raise GateError("not_configured", "tenant, when given, is the agent's tenant slug")
        self.issuer = issuer
        self.audience = audience
        self.tenant = tenant  # the agent's own tenant: decisions naming another one are refused
        self.keys = keys
        self.used_store = used_store
        self.reviewer_url = reviewer_url.rstrip("/") if reviewer_url else None
        self.api_token = api_token
        self.leeway_seconds = leeway_seconds
        self.http_timeout = http_timeout
        self._http = KeptAliveClient(http_timeout)  # for consume and outcome calls

    def _client(self) -> httpx.Client:
        return self._http.get()

    def close(self) -> None:
        """Close the kept-alive HTTP connections, its own and its key source's (a later call opens new
        ones)."""
        self._http.close()
        close_keys = getattr(self.keys, "close", None)
        if close_keys is not None:
            close_keys()

    # verify ---------------------------------------------------------------------------------

    def verify(
        self,
        token: str,
        *,
        task_id: str,
        request_id: str,
        action_digest: str,
        context_id: str | None = None,
        expires_at: datetime | str | float | None = None,
    ) -> VerifiedDecision:
        """Check everything about the token, then burn its jti. Raises GateError on any doubt.
        `expires_at` is the deadline the agent put in its own request, if it put one."""
        key = self._key_from_header(token)
        claims = self._signed_claims(token, key)
        self._check_tenant(claims)
        check_policy(claims)
        if expires_at is not None and claims.get("decision") == "approved":
            # Only a release is bound by it: a rejection or a question after the deadline still informs.
            check_request_deadline(claims, epoch_seconds(expires_at))
        self._check_binding(
            claims, task_id=task_id, request_id=request_id, action_digest=action_digest, context_id=context_id
        )
        decision = decision_from_claims(claims)
        if decision.request_id != request_id:
            decision = replace(decision, edited=True)
        # Last, so that a token refused for any other reason does not use up the decision.
        if not self.used_store.claim(decision.jti, decision.expires_at):
            raise GateError("replayed", f"decision {decision.jti} was already used")
        return decision

    def verify_transaction(
        self, token: str, *, txn: str, authorization_details: list[dict[str, Any]]
    ) -> VerifiedDecision:
        """`verify` for a protected resource (the transaction profile of the decision token): the same
        header, signature, issuer, audience (the resource's), time, tenant and policy checks, then the
        token bound to the challenged `txn` and to `authorization_details` recomputed by the resource
        from the request it is about to run (`check_transaction`) instead of to a task and request id;
        last, single use. Raises GateError on any doubt; an unapproved decision verifies too (the
        caller must still refuse it)."""
        key = self._key_from_header(token)
        claims = self._signed_claims(token, key)
        self._check_tenant(claims)
        check_policy(claims)
        check_transaction(claims, txn=txn, authorization_details=authorization_details)
        if claims.get("decision") not in DECISIONS:
            raise GateError("bad_decision", f"unknown decision {claims.get('decision')!r}")
        decision = decision_from_claims(claims)
        if not self.used_store.claim(decision.jti, decision.expires_at):
            raise GateError("replayed", f"decision {decision.jti} was already used")
        return decision

    def _key_from_header(self, token: str) -> Ed25519PublicKey:
        if not isinstance(token, str) or token.count(".") != 2:
            raise GateError("malformed", "not a compact JWS")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError as error:
            raise GateError("malformed", f"unreadable JOSE header: {error}") from error
        if header.get("alg") not in ALGORITHMS:
            raise GateError("bad_algorithm", f"alg {header.get('alg')!r} is not one of {ALGORITHMS}")
        if header.get("typ") != TOKEN_TYPE:
            raise GateError("bad_type", f"typ {header.get('typ')!r} is not {TOKEN_TYPE!r}")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise GateError("unknown_kid", "the token names no kid")
        return self.keys.key_for(kid)

    def _signed_claims(self, token: str, key: Ed25519PublicKey) -> dict[str, Any]:
        try:
            return jwt.decode(
                token,
                key,
                algorithms=ALGORITHMS,
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway_seconds,
                options={"require": REQUIRED_CLAIMS, "strict_aud": True},
            )
        except jwt.InvalidTokenError as error:
            raise _gate_error_from_jwt(error) from error

    def _check_tenant(self, claims: dict[str, Any]) -> None:
        if self.tenant is not None and claims.get("tenant") != self.tenant:
            raise GateError(
                "wrong_tenant",
                f"decision was made for tenant {claims.get('tenant')!r}, not this agent's {self.tenant!r}",
            )

    @staticmethod
    def _check_binding(
        claims: dict[str, Any], *, task_id: str, request_id: str, action_digest: str, context_id: str | None
    ) -> None:
        if claims.get("sub") != task_id:
            raise GateError("wrong_task", f"decision is for task {claims.get('sub')!r}, not {task_id!r}")
        if context_id is not None and claims.get("context_id") != context_id:
            raise GateError("wrong_context", f"decision is for context {claims.get('context_id')!r}")
        if claims.get("request_id") == request_id:
            if claims.get("action_digest") != action_digest:
                raise GateError(
                    "wrong_digest", "decision is for another action than the one this agent asked for"
                )
        elif request_id in (claims.get("replaces") or []):
            # A reviewer edited the request into a new proposal: the decision is for the edited action,
            # which the token carries; it must hash to the signed digest, and only it may be executed.
            edited = claims.get("action")
            if not isinstance(edited, dict) or _digest_of(edited) != claims.get("action_digest"):
                raise GateError("wrong_digest", "the edited action in the decision does not match its digest")
        else:
            raise GateError(
                "wrong_request", f"decision answers request {claims.get('request_id')!r}, not {request_id!r}"
            )
        if claims.get("decision") not in DECISIONS:
            raise GateError("bad_decision", f"unknown decision {claims.get('decision')!r}")

    # consume and report ---------------------------------------------------------------------

    def _decision_url(self, decision: VerifiedDecision, verb: str) -> str:
        if not self.reviewer_url:
            raise GateError("not_configured", "the gate has no reviewer_url")
        return f"{self.reviewer_url}/api/v1/decisions/{quote(decision.jti, safe='')}/{verb}"

    def _headers(self) -> dict[str, Any]:
        headers = {"Accept": "application/json", **trace_headers()}  # the agent's span, if any
        if self.api_token:
            headers["Authorization"] = f"Bearer {self.api_token}"
        return headers

    def _post(self, url: str, body: dict[str, Any]) -> httpx.Response:
        """POST, sent again while Reviewer answers 503 `overloaded`: its concurrency limit refused the
        request before it ran (nothing happened), so sending it again is safe even for a consume. Waits
        what Retry-After says (at most 10 s each), for at most OVERLOAD_RETRY_SECONDS in all; any other
        answer (a 503 while halted included) is returned to the caller as it came."""
        deadline = time.monotonic() + OVERLOAD_RETRY_SECONDS
        while True:
            response = self._client().post(url, json=body, headers=self._headers())
            if response.status_code != 503 or _error_from_body(response)[0] != "overloaded":
                return response
            pause = _retry_after_seconds(response)
            if time.monotonic() + pause > deadline:
                return response
            logger.info("POST %s: Reviewer is overloaded; again in %.1fs", url, pause)
            time.sleep(pause)  # backoff the server asked for

    def consume(self, decision: VerifiedDecision) -> None:
        """Ask Reviewer to move the decision approved → executing. Returns only if the agent may act.

        Call it right before the side effect. Anything but HTTP 200 raises GateError: a 409 carries
        Reviewer's reason (revoked, expired, superseded, consumed, stale_rev); a network error or a
        5xx is `reviewer_unreachable`. In every error case the caller must not act.
        """
        if not decision.approved:
            raise GateError("consume_refused:not_approved", f"decision is {decision.decision!r}")
        url = self._decision_url(decision, "consume")
        try:
            response = self._post(url, {"rev": decision.rev})
        except httpx.HTTPError as error:
            raise GateError("reviewer_unreachable", f"POST {url}: {error!r}") from error
        if response.status_code == 200:
            return
        if response.status_code >= 500:
            raise GateError("reviewer_unreachable", f"POST {url}: HTTP {response.status_code}")
        code, message = _error_from_body(response)
        if response.status_code == 409 and code:
            raise GateError(f"consume_refused:{code}", message)
        raise GateError(f"consume_refused:http_{response.status_code}", message)

    def report_outcome(
        self,
        decision: VerifiedDecision,
        status: str,
        *,
        transaction_id: str | None = None,
        detail: str | None = None,
    ) -> bool:
        """Tell Reviewer how the action ended ("succeeded" | "failed" | "unknown"). Best effort."""
        body: dict[str, Any] = {"status": status}
        if transaction_id is not None:
            body["transaction_id"] = transaction_id
        if detail is not None:
            body["detail"] = detail
        try:
            url = self._decision_url(decision, "outcome")
            response = self._post(url, body)
        except (GateError, httpx.HTTPError) as error:
            logger.warning("outcome %s for decision %s not reported: %s", status, decision.jti, error)
            return False
        if not response.is_success:
            logger.warning(
                "outcome %s for decision %s refused: HTTP %s %s",
                status,
                decision.jti,
                response.status_code,
                response.text[:200],
            )
            return False
        return True


OVERLOAD_RETRY_SECONDS = 30  # how long consume and outcome keep retrying an overloaded Reviewer


def _retry_after_seconds(response: httpx.Response) -> float:
    """Retry-After in seconds, between 0.1 and 10 (1 when absent or not a number)."""
    try:
        return min(max(float(response.headers.get("Retry-After", "1")), 0.1), 10.0)
    except ValueError:
        return 1.0


def _error_from_body(response: httpx.Response) -> tuple[str | None, str]:
    """(code, message) from Reviewer's `{"error": {"code", "message"}}`, tolerating other bodies."""
    try:
        error = response.json().get("error") or {}
    except (ValueError, AttributeError):
        return None, f"HTTP {response.status_code}: {response.text[:200]}"
    if not isinstance(error, dict):
        return None, f"HTTP {response.status_code}"
    code = error.get("code") if isinstance(error.get("code"), str) else None
    return code, str(error.get("message") or f"HTTP {response.status_code}")
