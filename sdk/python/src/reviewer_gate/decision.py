"""The decision token's contract, as the gate reads it: the constants, the error, the verified decision,
the claim checks that need no key, and the A2A metadata helpers. Standard library and rfc8785 only."""

import hashlib
import json
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import rfc8785

from reviewer_gate.tracing import with_trace

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
    # A batch member's decision names the manifest it was decided under (the `manifest` claim; the
    # digest of `manifest_digest`); None for a request asked about alone.
    manifest: str | None = None

    @property
    def approved(self) -> bool:
        return self.decision == "approved"


def _is_policy_ref(value: object) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("id"), str)
        and bool(value["id"])
        and isinstance(value.get("version"), int)
        and not isinstance(value.get("version"), bool)
    )


def check_policy(claims: dict[str, Any]) -> None:
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


def epoch_seconds(moment: object) -> float:
    if isinstance(moment, datetime):
        if moment.tzinfo is None:
            raise GateError("not_configured", "expires_at must be timezone-aware")
        return moment.timestamp()
    if isinstance(moment, str):
        try:
            return epoch_seconds(datetime.fromisoformat(moment.replace("Z", "+00:00")))
        except ValueError as error:
            raise GateError("not_configured", f"expires_at is not an RFC 3339 time: {moment!r}") from error
    if isinstance(moment, (int, float)) and not isinstance(moment, bool):
        return float(moment)
    raise GateError("not_configured", f"expires_at is not a time: {moment!r}")


def check_request_deadline(claims: dict[str, Any], deadline: float) -> None:
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


def decision_from_claims(claims: dict[str, Any]) -> VerifiedDecision:
    jti = claims.get("jti")
    if not isinstance(jti, str) or not jti:
        raise GateError("bad_claim", "jti must be a non-empty string")
    consume = claims.get("consume", False)
    if not isinstance(consume, bool):
        raise GateError("bad_claim", "consume must be a boolean")
    manifest = claims.get("manifest")
    if manifest is not None and not (isinstance(manifest, str) and manifest.startswith("sha256:")):
        raise GateError("bad_claim", "manifest must be a sha256: digest")
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
        manifest=manifest,
    )


# --- the transaction profile (a protected resource's side) ---------------------------------------


def authorization_details_digest(authorization_details: list[dict[str, Any]]) -> str:
    """`sha256:` + hex SHA-256 of the RFC 8785 form of a list of RAR authorization details: two lists
    describe the same operation exactly when their digests are equal (key order never matters)."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(authorization_details)).hexdigest()


def check_transaction(
    claims: dict[str, Any], *, txn: str, authorization_details: list[dict[str, Any]]
) -> None:
    """The one rule binding a transaction token to the operation a protected resource is about to run:
    the signed `txn` is the transaction the resource challenged, and the signed `authorization_details`
    are exactly those the resource recomputed from the request in hand (never read from the token).
    Exact equality, not "covers": a changed amount, another order or another route is another operation
    and needs its own decision."""
    granted = claims.get("authorization_details")
    if not isinstance(granted, list) or not all(isinstance(each, dict) for each in granted):
        raise GateError("missing_claim", "the token carries no authorization_details (a list of objects)")
    # The operation first: a changed amount is named as such, not as a transaction mismatch.
    if authorization_details_digest(granted) != authorization_details_digest(authorization_details):
        raise GateError(
            "wrong_operation",
            "the token authorizes another operation than the one this request would perform",
        )
    # The action the proposal showed people (`{"tool", "arguments"}`, arguments the detail itself) must be
    # the one the digest signs, and describe the same operation.
    action = claims.get("action")
    if action is not None:
        if not isinstance(action, dict) or action_digest(action) != claims.get("action_digest"):
            raise GateError("wrong_digest", "the token's action does not match its action_digest")
        if len(authorization_details) == 1 and action.get("arguments") != authorization_details[0]:
            raise GateError("wrong_operation", "the token's action is another operation than this request's")
    if not isinstance(claims.get("txn"), str) or not claims["txn"]:
        raise GateError("missing_claim", "the token carries no txn: it answers no transaction challenge")
    if claims["txn"] != txn:
        raise GateError(
            "wrong_txn", "the token answers another transaction (another caller, or another request body)"
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


def manifest_digest(member_digests: list[str]) -> str:
    """A batch's manifest digest: `sha256:` + hex SHA-256 of the RFC 8785 form of the list of its
    members' action digests, in the batch's order (docs/agents/batches.md)."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(list(member_digests))).hexdigest()


def approval_request_metadata(request: dict[str, Any]) -> dict[str, Any]:
    """The status-message metadata that asks Reviewer for approval of `request`."""
    # A JSON round trip catches values a protobuf Struct cannot carry before the SDK does.
    return with_trace({EXTENSION_URI: {"request": json.loads(json.dumps(request))}})


def batch_request_metadata(
    requests: list[dict[str, Any]], *, batch_id: str, summary: str = ""
) -> dict[str, Any]:
    """The status-message metadata that asks Reviewer about `requests` as one batch with a fixed
    manifest (docs/agents/batches.md#over-a2a): the parked task is the batch's task, and each member's
    decision comes back as its own continuation to it."""
    batch = {
        "batch_id": batch_id,
        "summary": summary[:200],
        "manifest_digest": manifest_digest([str(request["action_digest"]) for request in requests]),
        "members": requests,
    }
    return with_trace({EXTENSION_URI: {"batch": json.loads(json.dumps(batch))}})
