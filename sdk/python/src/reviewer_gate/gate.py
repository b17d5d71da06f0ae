"""Agent-side verifier for Reviewer's signed approval decisions (a standalone file: no Django).

An agent that asks Reviewer for approval imports this module from the `reviewer-gate` distribution
(`pip install reviewer-gate`; `from reviewer_gate import gate`). It imports only the standard library,
PyJWT, cryptography, httpx and rfc8785, never Django or Reviewer, so it can also be vendored as one file.

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
    UsedDecisionStore                              Protocol: claim(jti, expires_at) -> bool
    MemoryUsedStore()                              one process only
    SQLiteUsedStore(path)                          shared by processes and threads on one file
    Gate(*, issuer, audience, keys, used_store, reviewer_url=None, api_token=None,
         leeway_seconds=30, http_timeout=5, tenant=None)
        .verify(token, *, task_id, request_id, action_digest, context_id=None, expires_at=None)
                                                   -> VerifiedDecision; expires_at: the request's own
                                                   deadline (datetime, RFC 3339 string or epoch seconds)
        .consume(decision) -> None                 raises GateError when the agent must not act
        .report_outcome(decision, status, *, transaction_id=None, detail=None) -> bool
        .close() -> None                           closes its kept-alive HTTP connections
    decision_token_from_metadata(metadata) -> str | None
    action_digest(action) -> str
    approval_request_metadata(request) -> dict[str, Any]

GateError codes: malformed, bad_algorithm, bad_type, unknown_kid, keys_unavailable, bad_signature,
expired, not_yet_valid, wrong_issuer, wrong_audience, wrong_tenant, missing_claim, bad_claim, wrong_task,
wrong_context, wrong_request, wrong_digest, bad_decision, bad_policy, request_expired, replayed,
not_configured, consume_refused:<code> (Reviewer's 409 error code, or http_<status> for another refusal),
reviewer_unreachable.
"""

import hashlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import httpx
import jwt
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

logger = logging.getLogger(__name__)

EXTENSION_URI = "urn:reviewer:a2a:approval:v1"
TOKEN_TYPE = "approval-decision+jwt"  # noqa: S105 - a JOSE typ value, not a secret
# Fixed, never taken from the token: `none`, HS* (public key used as an HMAC secret) and RS* are refused.
ALGORITHMS = ["EdDSA"]
DECISIONS = ("approved", "rejected", "needs_info")

# Claims DESIGN.md says every decision carries; a token without one of them is refused.
REQUIRED_CLAIMS = ["iss", "aud", "sub", "jti", "iat", "nbf", "exp", "request_id", "action_digest", "decision"]


class GateError(Exception):
    """The decision must not be acted on. `code` is stable and machine-readable."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class VerifiedDecision:
    """A decision whose signature, audience, time, binding and single use were checked."""

    jti: str
    decision: str  # "approved" | "rejected" | "needs_info"; only "approved" may lead to action
    reason: str
    task_id: str
    context_id: str | None
    request_id: str
    proposal_id: str | None
    action_digest: str
    rev: int | None
    consume: bool
    approvers: list[dict[str, Any]] = field(default_factory=list)
    policy: dict[str, Any] | None = None  # {id, version}: always present in a verified decision
    policies: list[dict[str, Any]] = field(default_factory=list)  # every {id, version} that shaped it
    tenant: str | None = None
    expires_at: int = 0
    claims: dict[str, Any] = field(default_factory=dict)
    # The exact action the decision releases. Differs from what the agent asked for only when a
    # reviewer edited it (`edited`): then execute this action, never the original one.
    action: dict[str, Any] | None = None
    edited: bool = False

    @property
    def approved(self) -> bool:
        return self.decision == "approved"


# --- keys ---------------------------------------------------------------------------------------


def _public_key_from_jwk(jwk: dict[str, Any]) -> Ed25519PublicKey | None:
    """The Ed25519 key of one JWK, or None for a key this gate will never accept."""
    if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
        return None
    if jwk.get("use") not in (None, "sig") or jwk.get("alg") not in (None, *ALGORITHMS):
        return None
    try:
        key = jwt.PyJWK(jwk, algorithm="EdDSA").key
    except (jwt.PyJWKError, ValueError, TypeError):
        return None
    return key if isinstance(key, Ed25519PublicKey) else None


def _keys_by_kid(jwks: dict[str, Any]) -> dict[str, Ed25519PublicKey]:
    keys: dict[str, Ed25519PublicKey] = {}
    for jwk in jwks.get("keys", []) if isinstance(jwks, dict) else []:
        kid = jwk.get("kid") if isinstance(jwk, dict) else None
        key = _public_key_from_jwk(jwk) if isinstance(kid, str) else None
        if isinstance(kid, str) and key is not None:
            keys[kid] = key
    return keys


class KeySource(Protocol):
    def key_for(self, kid: str) -> Ed25519PublicKey:
        """The public key named kid. Raises GateError ("unknown_kid", "keys_unavailable")."""


class StaticKeySource:
    """Keys from a JWKS document held in memory (tests, or keys pinned in configuration)."""

    def __init__(self, jwks: dict[str, Any]):
        self._keys = _keys_by_kid(jwks)

    def key_for(self, kid: str) -> Ed25519PublicKey:
        try:
            return self._keys[kid]
        except KeyError:
            raise GateError("unknown_kid", f"no Ed25519 key with kid {kid!r}") from None


def _fetch_jwks_over_http(url: str, timeout: float) -> dict[str, Any]:
    response = httpx.get(url, timeout=timeout, headers={"Accept": "application/json"})
    response.raise_for_status()
    document = response.json()
    return document if isinstance(document, dict) else {}  # a JWKS that is no object holds no keys


class JWKSKeySource:
    """Keys from Reviewer's `/.well-known/jwks.json`, cached for `cache_seconds`.

    An unknown kid triggers one refresh (Reviewer may have rotated its key) and is refused if still
    unknown. Refreshes for unknown kids are at most one per `min_refresh_seconds`, so a stream of
    forged tokens with random kids cannot turn this agent into a JWKS request amplifier.
    A JWKS that cannot be fetched fails closed (`keys_unavailable`).
    """

    def __init__(
        self,
        jwks_url: str,
        *,
        cache_seconds: float = 300,
        timeout: float = 5,
        min_refresh_seconds: float = 10,
        fetch: Callable[[str, float], dict[str, Any]] | None = None,
    ):
        self.jwks_url = jwks_url
        self.cache_seconds = cache_seconds
        self.timeout = timeout
        self.min_refresh_seconds = min_refresh_seconds
        self._fetch = fetch or _fetch_jwks_over_http
        self._lock = threading.Lock()
        self._keys: dict[str, Ed25519PublicKey] = {}
        self._fetched_at: float | None = None
        self.fetch_count = 0

    def _refresh(self) -> None:
        self.fetch_count += 1
        try:
            document = self._fetch(self.jwks_url, self.timeout)
        except Exception as error:  # any transport or parse error: refuse rather than guess
            raise GateError("keys_unavailable", f"cannot fetch JWKS from {self.jwks_url}: {error}") from error
        self._keys = _keys_by_kid(document)
        self._fetched_at = time.monotonic()

    def key_for(self, kid: str) -> Ed25519PublicKey:
        with self._lock:
            now = time.monotonic()
            fetched_at = self._fetched_at
            if fetched_at is None or now - fetched_at >= self.cache_seconds:
                self._refresh()
            elif kid not in self._keys and now - fetched_at >= self.min_refresh_seconds:
                self._refresh()  # the one refresh an unknown kid gets
            try:
                return self._keys[kid]
            except KeyError:
                raise GateError(
                    "unknown_kid", f"no Ed25519 key with kid {kid!r} in {self.jwks_url}"
                ) from None


# --- single use ---------------------------------------------------------------------------------


class UsedDecisionStore(Protocol):
    def claim(self, jti: str, expires_at: int) -> bool:
        """Record jti as used. True only the first time it is claimed."""


class MemoryUsedStore:
    """Single use within one process (tests, single-process agents that may forget on restart)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._used: dict[str, int] = {}

    def claim(self, jti: str, expires_at: int) -> bool:
        with self._lock:
            if jti in self._used:
                return False
            self._used[jti] = expires_at
            return True


class SQLiteUsedStore:
    """Single use across threads and processes sharing one SQLite file.

    The primary key makes the claim atomic: `INSERT OR IGNORE` inserts exactly once, whoever races.
    Rows are kept a day past the token's expiry (the gate refuses an expired token before it gets
    here, so forgetting them later cannot re-open a decision).
    """

    RETAIN_AFTER_EXPIRY_SECONDS = 86400

    def __init__(self, path: str | Path):
        self.path = str(path)
        with self._connect() as connection:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute(
                "CREATE TABLE IF NOT EXISTS used_decisions ("
                " jti TEXT PRIMARY KEY, expires_at INTEGER NOT NULL, claimed_at INTEGER NOT NULL)"
            )
            connection.execute(
                "CREATE INDEX IF NOT EXISTS used_decisions_expires_at ON used_decisions (expires_at)"
            )

    def _connect(self) -> sqlite3.Connection:
        # One short-lived connection per call: sqlite3 connections must not cross threads.
        connection = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        return connection

    def claim(self, jti: str, expires_at: int) -> bool:
        now = int(time.time())
        connection = self._connect()
        try:
            cursor = connection.execute(
                "INSERT OR IGNORE INTO used_decisions (jti, expires_at, claimed_at) VALUES (?, ?, ?)",
                (jti, int(expires_at), now),
            )
            claimed = cursor.rowcount == 1
            connection.execute(
                "DELETE FROM used_decisions WHERE expires_at < ?", (now - self.RETAIN_AFTER_EXPIRY_SECONDS,)
            )
            return claimed
        finally:
            connection.close()


# --- the gate -----------------------------------------------------------------------------------

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
        """Close the kept-alive HTTP connections (a later call opens new ones)."""
        self._http.close()

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
        _check_policy(claims)
        if expires_at is not None and claims.get("decision") == "approved":
            # Only a release is bound by it: a rejection or a question after the deadline still informs.
            _check_request_deadline(claims, _epoch_seconds(expires_at))
        self._check_binding(
            claims, task_id=task_id, request_id=request_id, action_digest=action_digest, context_id=context_id
        )
        decision = _decision_from_claims(claims)
        if decision.request_id != request_id:
            decision = replace(decision, edited=True)
        # Last, so that a token refused for any other reason does not use up the decision.
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
        headers = {"Accept": "application/json"}
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


def _is_policy_ref(value: object) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("id"), str)
        and bool(value["id"])
        and isinstance(value.get("version"), int)
        and not isinstance(value.get("version"), bool)
    )


def _check_policy(claims: dict[str, Any]) -> None:
    """Every decision names the policy that decided it (DESIGN: `policy: {id, version}`); a token
    without one is malformed, whatever else it says. `policies` (every version that shaped it) is
    optional for older tokens, but when present it is a list of such objects naming `policy` too."""
    policy = claims.get("policy")
    if not _is_policy_ref(policy):
        raise GateError("bad_policy", f"the decision names no policy object {{id, version}}: {policy!r}")
    policies = claims.get("policies")
    if policies is not None and (
        not isinstance(policies, list)
        or not all(_is_policy_ref(each) for each in policies)
        or policy not in policies
    ):
        raise GateError("bad_policy", "policies must be a list of {id, version} objects that includes policy")


def _epoch_seconds(moment: object) -> float:
    if isinstance(moment, datetime):
        if moment.tzinfo is None:
            raise GateError("not_configured", "expires_at must be timezone-aware")
        return moment.timestamp()
    if isinstance(moment, str):
        try:
            return _epoch_seconds(datetime.fromisoformat(moment.replace("Z", "+00:00")))
        except ValueError as error:
            raise GateError("not_configured", f"expires_at is not an RFC 3339 time: {moment!r}") from error
    if isinstance(moment, (int, float)) and not isinstance(moment, bool):
        return float(moment)
    raise GateError("not_configured", f"expires_at is not a time: {moment!r}")


def _check_request_deadline(claims: dict[str, Any], deadline: float) -> None:
    """The agent's own deadline binds whatever Reviewer signed: no clock skew is granted on it (it is
    the agent's clock), and a token that would outlive it is refused as Reviewer should never sign one."""
    if time.time() >= deadline:
        raise GateError("request_expired", "the request's own expires_at has passed; nothing may execute")
    if _optional_int(claims.get("exp")) is None or claims["exp"] > deadline:
        raise GateError("request_expired", "the decision's exp is later than the request's expires_at")


def _optional_int(value: object) -> int | None:
    # Struct round trips and JSON producers may turn integers into floats; accept only whole numbers.
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise GateError("bad_claim", f"expected an integer, got {value!r}")


def _decision_from_claims(claims: dict[str, Any]) -> VerifiedDecision:
    jti = claims.get("jti")
    if not isinstance(jti, str) or not jti:
        raise GateError("bad_claim", "jti must be a non-empty string")
    consume = claims.get("consume", False)
    if not isinstance(consume, bool):
        raise GateError("bad_claim", "consume must be a boolean")
    return VerifiedDecision(
        jti=jti,
        decision=claims["decision"],
        reason=str(claims.get("reason") or ""),
        task_id=claims["sub"],
        context_id=claims.get("context_id"),
        request_id=claims["request_id"],
        proposal_id=claims.get("proposal_id"),
        action_digest=claims["action_digest"],
        rev=_optional_int(claims.get("rev")),
        consume=consume,
        approvers=list(claims.get("approvers") or []),
        policy=claims.get("policy"),
        policies=list(claims.get("policies") or [claims["policy"]]),
        tenant=claims.get("tenant"),
        expires_at=int(claims["exp"]),
        claims=dict(claims),
        action=claims.get("action") if isinstance(claims.get("action"), dict) else None,
    )


# --- helpers for the A2A messages ---------------------------------------------------------------


def decision_token_from_metadata(metadata: dict[str, Any] | None) -> str | None:
    """The decision JWT in a continuation message's metadata, or None.

    Pass `MessageToDict(context.message.metadata)`.
    """
    if not isinstance(metadata, dict):
        return None
    extension = metadata.get(EXTENSION_URI)
    if not isinstance(extension, dict):
        return None
    token = extension.get("decision")
    return token if isinstance(token, str) and token else None


def action_digest(action: dict[str, Any]) -> str:
    """`sha256:` + hex SHA-256 of the RFC 8785 (JCS) form of the action: key order does not matter,
    Unicode is kept as is, and `"40.00"` differs from `40.0` (send amounts as strings)."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(action)).hexdigest()


_digest_of = action_digest  # Gate methods take a parameter named action_digest


def approval_request_metadata(request: dict[str, Any]) -> dict[str, Any]:
    """The status-message metadata that asks Reviewer for approval of `request`."""
    # A JSON round trip catches values a protobuf Struct cannot carry before the SDK does.
    return {EXTENSION_URI: {"request": json.loads(json.dumps(request))}}
