"""Verifying a resource's transaction authorization challenge (the draft's §4.2, §4.6).

In this order, so nothing is read from an unverified challenge but the `iss` that names whose keys to
use: the shape (a compact JWS), the header (`typ` txn-authz-challenge+jwt, `alg` EdDSA or ES256), the
resource (`iss` = a registered resource's audience), its key (`kid`), the signature, then `aud`
(Reviewer), `iat`/`exp` (30 s leeway, at most 10 minutes of life) and the claims' types. Every failure
is `invalid_grant`, its description naming the check."""

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jwt
from django.conf import settings

from oauth.errors import OAuthError
from oauth.keys import key_for
from oauth.models import ProtectedResource

CHALLENGE_TYPE = "txn-authz-challenge+jwt"
ALGORITHMS = ("EdDSA", "ES256")
LEEWAY_SECONDS = 30
LIFETIME_MAX_SECONDS = 600
JTI_MAX = 196  # request_id = "tac-" + jti, at most 200
COMPACT_JWS = re.compile(
    r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$"
)  # an unsigned one: refused by alg


@dataclass(frozen=True)
class Challenge:
    resource: ProtectedResource
    jti: str
    txn: str
    authorization_details: object
    reason: str
    caller: str
    subject: str
    reason_uri: str
    expires_at: datetime


def refused(description: str) -> OAuthError:
    return OAuthError("invalid_grant", f"the transaction challenge was refused: {description}")


def _string(claims: dict[str, Any], name: str, *, limit: int, required: bool = True) -> str:
    value = claims.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value or len(value) > limit:
        raise refused(f"the claim {name!r} must be a string of 1 to {limit} characters")
    return value


def verify_challenge(text: str) -> Challenge:
    if not COMPACT_JWS.match(text):
        raise OAuthError("invalid_request", "transaction_challenge is not a compact JWS")
    try:
        header = jwt.get_unverified_header(text)
        unverified = jwt.decode(text, options={"verify_signature": False})
    except jwt.PyJWTError as error:
        raise OAuthError("invalid_request", "transaction_challenge is not a compact JWS") from error
    if header.get("typ") != CHALLENGE_TYPE:
        raise refused(f"typ must be {CHALLENGE_TYPE}")
    algorithm = header.get("alg")
    if algorithm not in ALGORITHMS:
        raise refused("alg must be EdDSA or ES256")
    issuer = unverified.get("iss")
    if not isinstance(issuer, str) or not issuer:
        raise refused("no iss")
    resource = (
        ProtectedResource.objects.select_related("agent", "agent__tenant")
        .filter(agent__audience=issuer)
        .first()
    )
    if resource is None:
        raise refused(f"{issuer[:200]!r} is not a registered resource")
    kid = header.get("kid")
    found = key_for(resource.jwks, kid if isinstance(kid, str) else None)
    if found is None:
        raise refused("the resource has no key with this kid")
    key, key_algorithm = found
    if key_algorithm != algorithm:
        raise refused(f"the key {kid!r} signs with {key_algorithm}, not {algorithm}")
    try:
        claims = jwt.decode(
            text,
            key,
            algorithms=[key_algorithm],
            audience=settings.REVIEWER_ISSUER,
            issuer=issuer,
            leeway=LEEWAY_SECONDS,
            options={"require": ["iss", "aud", "iat", "exp", "jti"]},
        )
    except jwt.InvalidSignatureError as error:
        raise refused("bad signature") from error
    except jwt.ExpiredSignatureError as error:
        raise refused("expired") from error
    except jwt.ImmatureSignatureError as error:
        raise refused("issued in the future") from error
    except jwt.InvalidAudienceError as error:
        raise refused(f"aud is not {settings.REVIEWER_ISSUER}") from error
    except jwt.PyJWTError as error:
        raise refused(str(error)) from error
    if claims["exp"] - claims["iat"] > LIFETIME_MAX_SECONDS:
        raise refused(f"a challenge lives at most {LIFETIME_MAX_SECONDS} s")
    actor = claims.get("act")
    if not isinstance(actor, dict):
        raise refused("the claim 'act' must be an object with the caller's sub")
    reason_uri = _string(claims, "reason_uri", limit=1000, required=False)
    if reason_uri and not reason_uri.startswith(("https://", "http://")):
        reason_uri = ""  # shown as a link: javascript: or data: would run in Reviewer's origin
    if "authorization_details" not in claims:
        raise refused("no authorization_details")
    return Challenge(
        resource=resource,
        jti=_string(claims, "jti", limit=JTI_MAX),
        txn=_string(claims, "txn", limit=200),
        authorization_details=claims["authorization_details"],
        reason=_string(claims, "reason", limit=2000)[:500],
        caller=_string(actor, "sub", limit=200),
        subject=_string(claims, "sub", limit=200, required=False),
        reason_uri=reason_uri,
        expires_at=datetime.fromtimestamp(claims["exp"], tz=UTC),
    )
