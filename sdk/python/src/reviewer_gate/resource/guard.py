"""The enforcement point, framework-free: what a protected resource answers to a request, and when its
handler may run. The ASGI and WSGI middlewares and the proxy are thin shells around `ResourceGuard`.

For a request to a protected route, `ResourceGuard.handle` returns either an `Answer` (the guard
answers; the handler never runs) or a `Release` (run the handler now, once, then call `settle` with its
status). The order of the checks:

1. the route's description of the request (its RAR `authorization_details`), recomputed from the real
   method, path parameters and body; a request that cannot be described is 400 `invalid_request`;
2. a transaction token (`Authorization: Bearer <Reviewer's decision token>`): verified by the gate
   (Reviewer's JWKS, issuer, audience = this resource, time, tenant, policy), bound to the request
   (`authorization_details` equal to those just recomputed, `txn` made by this resource for this very
   request and caller), approved, burned locally, then consumed online at Reviewer; only then Release;
3. no token, from a caller that speaks TAC (`Accept-Txn-Challenge: ?1`) or when the 202 mode is off:
   401 with the signed challenge in `WWW-Authenticate`;
4. no token, 202 mode on: the guard files the proposal itself (idempotent on a request id derived
   from the request and its caller). When policy allows it there, Reviewer consumes the approval in
   that same request (`Prefer: consume`): the gate verifies it and the handler runs, one request to
   Reviewer. Otherwise the guard answers 202 with a status URL and `Retry-After`; the same request
   sent again after people approved finds the decision in the intake answer, verifies and consumes
   it, and runs once.

Every call here blocks (HTTP to Reviewer): from asyncio code run `handle` and `settle` in a thread.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import jwt

from reviewer_gate.client import ReviewerClient
from reviewer_gate.decision import TOKEN_TYPE, GateError, VerifiedDecision, authorization_details_digest
from reviewer_gate.gate import Gate, JWKSKeySource, MemoryUsedStore, UsedDecisionStore
from reviewer_gate.resource.answers import Answer, bearer_challenge, refusal
from reviewer_gate.resource.callers import Caller, CallerOf
from reviewer_gate.resource.challenge import CHALLENGE_ALGORITHM, ResourceKey
from reviewer_gate.resource.intake import IntakeDoor, intake_refusal
from reviewer_gate.resource.routes import (
    OperationError,
    ProtectedRequest,
    Route,
    find_route,
    request_fingerprint,
)
from reviewer_gate.tracing import continuing

logger = logging.getLogger(__name__)

TXN_ERROR = "transaction_authorization_required"
PROTECTED_RESOURCE_METADATA_PATH = "/.well-known/oauth-protected-resource"
CHALLENGE_JWKS_PATH = "/.well-known/txn-challenge-jwks.json"
DEFAULT_STATUS_PATH = "/.reviewer-gate/proposals/"
DEFAULT_REASON = "People must approve this operation before it runs."
NO_SUCH_TXN = "\x00not-this-request"  # never a txn: new_txn makes printable text only
MAX_CHALLENGE_SECONDS = 600  # Reviewer refuses a challenge whose exp is further than this after its iat


@dataclass(frozen=True)
class Release:
    """Run the handler now, once: the decision is verified and consumed. Use `decision.jti` as the
    downstream idempotency key; then `ResourceGuard.settle(release, status)`."""

    decision: VerifiedDecision
    request: ProtectedRequest
    route: Route


def transaction_binding(
    request: ProtectedRequest, details: list[dict[str, Any]], caller: Caller | None
) -> str:
    """What a txn binds: the operation, the caller and the exact request, so that a token obtained for
    one request releases no other (another body, even with the same description, is another txn)."""
    return "\n".join(
        (authorization_details_digest(details), caller.sub if caller else "", request_fingerprint(request))
    )


# How a gate refusal of a presented token is answered: the token does not cover this operation (403
# insufficient_scope), or it is no good at all (401 invalid_token).
_OPERATION_CODES = frozenset({"wrong_operation", "wrong_txn"})


# Reviewer (or its keys) could not be reached: nothing is known about the token, so fail closed, and
# say it is temporary.
UNREACHABLE_CODES = frozenset({"reviewer_unreachable", "keys_unavailable"})


def token_refusal(error: GateError) -> Answer:
    if error.code in UNREACHABLE_CODES:
        return refusal(
            503, "temporarily_unavailable", "Reviewer could not be reached; nothing ran", code=error.code
        )
    if error.code in _OPERATION_CODES:
        return refusal(403, "insufficient_scope", error.message, code=error.code)
    if error.code in ("replayed", "consume_refused:consumed"):
        return refusal(
            401, "invalid_token", "this approval was already used; it releases one request", code=error.code
        )
    return refusal(401, "invalid_token", error.message, code=error.code)


class ResourceGuard:
    """Requires a Reviewer decision before a protected route's handler runs.

    - `routes`: the protected operations (unmatched requests pass through untouched);
    - `audience`: this resource's identifier, the `audience` of its registration in Reviewer (a pull
      agent): decision tokens must name it, challenges are issued by it;
    - `reviewer_url`, `api_token`: Reviewer and the registration's API token (consume, outcome, and the
      202 mode's intake); `issuer` (default `reviewer_url`), `jwks_url` (default its JWKS);
    - `key`: the resource's Ed25519 key (`ResourceKey`), whose public half Reviewer holds;
    - `caller`: who sent the request (`api_key_caller`, `trusted_header_caller` or your own);
    - `intake`: the 202 mode for callers that do not send `Accept-Txn-Challenge: ?1`;
    - `used_store`: the local single-use record (use `SQLiteUsedStore` across processes; Reviewer's
      consume is single use in any case); `tenant`, `agent`: as for `ReviewerClient`.
    """

    def __init__(
        self,
        *,
        routes: list[Route],
        audience: str,
        reviewer_url: str,
        api_token: str,
        key: ResourceKey,
        caller: CallerOf | None = None,
        intake: bool = False,
        issuer: str | None = None,
        jwks_url: str | None = None,
        used_store: UsedDecisionStore | None = None,
        tenant: str | None = None,
        agent: str | None = None,
        gate: Gate | None = None,
        reason: str = DEFAULT_REASON,
        challenge_seconds: int = 300,
        retry_after_seconds: int = 5,
        status_path: str = DEFAULT_STATUS_PATH,
        http_timeout: float = 10,
    ):
        if not 0 < challenge_seconds <= MAX_CHALLENGE_SECONDS:
            raise ValueError(f"challenge_seconds is between 1 and {MAX_CHALLENGE_SECONDS} (Reviewer's bound)")
        self.routes = list(routes)
        self.audience = audience
        self.reviewer_url = reviewer_url.rstrip("/")
        self.issuer = (issuer or self.reviewer_url).rstrip("/")
        self.key = key
        self.caller_of = caller or (lambda request: None)
        self.intake = intake
        self.reason = reason
        self.challenge_seconds = challenge_seconds
        self.retry_after_seconds = retry_after_seconds
        self.status_path = "/" + status_path.strip("/") + "/"
        self.gate = gate or Gate(
            issuer=self.issuer,
            audience=audience,
            keys=JWKSKeySource(jwks_url or f"{self.reviewer_url}/.well-known/jwks.json"),
            used_store=used_store or MemoryUsedStore(),
            reviewer_url=self.reviewer_url,
            api_token=api_token,
            tenant=tenant,
            http_timeout=http_timeout,
        )
        # The 202 mode's intake: idempotent, so its retries are safe; a consume never goes through it.
        self.client = ReviewerClient(
            reviewer_url=self.reviewer_url,
            api_token=api_token,
            audience=audience,
            gate=self.gate,
            agent=agent,
            http_timeout=http_timeout,
            retries=2,
        )
        self.intake_door = IntakeDoor(
            client=self.client,
            gate=self.gate,
            status_path=self.status_path,
            retry_after_seconds=retry_after_seconds,
        )

    def close(self) -> None:
        self.client.close()

    # the entry point ---------------------------------------------------------------------------

    def concerns(self, method: str, path: str) -> bool:
        """Whether the guard has anything to do with this request (a protected route, or one of the
        paths it serves): the middlewares read a body only then."""
        if find_route(self.routes, method, path) is not None:
            return True
        return method.upper() == "GET" and (
            path in (PROTECTED_RESOURCE_METADATA_PATH, CHALLENGE_JWKS_PATH)
            or (self.intake and path.startswith(self.status_path))
        )

    def handle(self, request: ProtectedRequest) -> Answer | Release | None:
        """None: not a protected route, pass it through. Answer: send it, run nothing. Release: run.
        Reviewer's spans of the decision join the caller's trace (reviewer_gate/tracing.py)."""
        with continuing(request.headers):
            return self._handle(request)

    def _handle(self, request: ProtectedRequest) -> Answer | Release | None:
        served = self._served(request)
        if served is not None:
            return served
        found = find_route(self.routes, request.method, request.path)
        if found is None:
            return None
        route, params = found
        request = replace(request, path_params=params)
        try:
            details = route.details_of(request)
        except OperationError as error:
            return refusal(400, "invalid_request", str(error))
        caller = self.caller_of(request)
        token = self._transaction_token(request)
        if token is not None:
            return self._release_token(request, route, details, caller, token)
        if self.intake and not _accepts_challenge(request):
            asked = self.intake_door.ask(request, route, details, caller)
            if isinstance(asked, Answer):
                return asked
            return self._release(request, route, asked.decision, tac=False, consumed=asked.consumed)
        return self._challenge(request, details, caller)

    def settle(self, release: Release, status: int | None) -> bool:
        """Report the handler's outcome to Reviewer (best effort): 2xx and 3xx `succeeded`, 4xx `failed`
        (the handler refused: nothing happened), 5xx or an exception (`status` None) `unknown`."""
        if status is None or status >= 500:
            outcome = "unknown"
        elif status >= 400:
            outcome = "failed"
        else:
            outcome = "succeeded"
        detail = f"{release.request.method} {release.request.path} answered " + (
            f"HTTP {status}" if status is not None else "with an exception"
        )
        with continuing(release.request.headers):
            return self.gate.report_outcome(release.decision, outcome, detail=detail)

    # the TAC path ------------------------------------------------------------------------------

    @staticmethod
    def _transaction_token(request: ProtectedRequest) -> str | None:
        """The decision token in `Authorization: Bearer`, told apart from the caller's own bearer
        credential by its JOSE `typ` (read only to route it: the gate verifies everything)."""
        scheme, _, value = (request.header("authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or value.strip().count(".") != 2:
            return None
        try:
            header = jwt.get_unverified_header(value.strip())
        except jwt.DecodeError:
            return None
        return value.strip() if header.get("typ") == TOKEN_TYPE else None

    def _challenge(
        self, request: ProtectedRequest, details: list[dict[str, Any]], caller: Caller | None
    ) -> Answer:
        challenge, claims = self.key.challenge(
            issuer=self.audience,
            authorization_server=self.issuer,
            authorization_details=details,
            reason=self.reason,
            caller_sub=caller.sub if caller else None,
            binding=transaction_binding(request, details, caller),
            lifetime_seconds=self.challenge_seconds,
        )
        description = "Transaction-specific authorization is required"
        header = bearer_challenge(TXN_ERROR, description, transaction_challenge=challenge)
        body = {
            "error": TXN_ERROR,
            "error_description": description,
            "transaction_challenge": challenge,
            "authorization_details": details,
            "txn": claims["txn"],
        }
        return Answer.json(401, body, [("www-authenticate", header)])

    def _release_token(
        self,
        request: ProtectedRequest,
        route: Route,
        details: list[dict[str, Any]],
        caller: Caller | None,
        token: str,
    ) -> Answer | Release:
        try:
            claimed_txn = jwt.decode(token, options={"verify_signature": False}).get("txn")
        except jwt.PyJWTError:
            claimed_txn = None
        # The unverified txn is only a candidate: the gate checks the signed one equals it. One that this
        # key did not make for this request and caller is replaced by a value no token carries, so the
        # gate's own checks still run first (a token for another resource is refused as such).
        binding = transaction_binding(request, details, caller)
        if isinstance(claimed_txn, str) and self.key.txn_is_for(claimed_txn, binding):
            expected_txn = claimed_txn
        else:
            expected_txn = NO_SUCH_TXN
        try:
            decision = self.gate.verify_transaction(token, txn=expected_txn, authorization_details=details)
        except GateError as error:
            return token_refusal(error)
        return self._release(request, route, decision, tac=True)

    def _release(
        self,
        request: ProtectedRequest,
        route: Route,
        decision: VerifiedDecision,
        *,
        tac: bool,
        consumed: bool = False,
    ) -> Answer | Release:
        """`consumed`: Reviewer consumed the decision at intake (the 202 mode's intake answer)."""
        if not decision.approved:
            words = f"Reviewer decided {decision.decision}" + (
                f": {decision.reason}" if decision.reason else ""
            )
            return refusal(403, "access_denied", words, code=decision.decision)
        if decision.edited:
            return refusal(
                403,
                "access_denied",
                "a reviewer edited this request; send the edited request instead",
                code="edited",
            )
        if consumed:
            return Release(decision=decision, request=request, route=route)
        try:
            self.gate.consume(decision)  # online, right before the handler: single use, revocation, expiry
        except GateError as error:
            return token_refusal(error) if tac else intake_refusal(error)
        return Release(decision=decision, request=request, route=route)

    # what the guard serves itself --------------------------------------------------------------

    def _served(self, request: ProtectedRequest) -> Answer | None:
        if request.method.upper() != "GET":
            return None
        if request.path == PROTECTED_RESOURCE_METADATA_PATH:
            return Answer.json(
                200,
                {
                    "resource": self.audience,
                    "authorization_servers": [self.issuer],
                    "txn_challenge_jwks_uri": self.audience.rstrip("/") + CHALLENGE_JWKS_PATH,
                    "txn_challenge_signing_alg_values_supported": [CHALLENGE_ALGORITHM],
                },
            )
        if request.path == CHALLENGE_JWKS_PATH:
            return Answer.json(200, self.key.jwks())
        if self.intake and request.path.startswith(self.status_path):
            return self.intake_door.status(request.path[len(self.status_path) :])
        return None


def _accepts_challenge(request: ProtectedRequest) -> bool:
    """`Accept-Txn-Challenge: ?1` (a structured-field Boolean; anything else counts as absent)."""
    value = (request.header("accept-txn-challenge") or "").split(";")[0].strip()
    return value == "?1"
