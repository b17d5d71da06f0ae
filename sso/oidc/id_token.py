"""The ID-token check of a sign-in at the tenant's provider. mozilla-django-oidc's own check leaves the
audience unchecked and the issuer to the caller, so this one checks signature, algorithm, issuer,
audience (and `azp`), expiry, issue time and nonce itself with PyJWT, and refuses with a SignInRefused
naming what was wrong."""

import hmac

import jwt
import requests
from django.core.exceptions import SuspiciousOperation

from sso.errors import SignInRefused

ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "PS256"]  # never "none", never HS* (shared secret)
CLOCK_SKEW_SECONDS = 60


def verified_claims(relying_party, token: str, *, nonce: str | None) -> dict:
    """The ID token's claims when its signature (the provider's JWKS, an asymmetric algorithm), issuer,
    audience, authorized party, expiry, issue time and nonce are all right; SignInRefused otherwise.
    `relying_party` is the tenant's TenantRelyingParty (sso/oidc/backend.py): its provider, and the
    library's lookup of the provider's key."""
    provider = relying_party.provider
    try:
        header = jwt.get_unverified_header(token or "")
    except jwt.DecodeError:
        raise SignInRefused("malformed_token", "the provider sent no well-formed ID token") from None
    if header.get("alg") not in ALGORITHMS:
        raise SignInRefused("bad_algorithm", f"ID tokens signed with {header.get('alg')!r} are not accepted")
    try:
        key = relying_party.retrieve_matching_jwk(token)
    except (SuspiciousOperation, requests.RequestException, jwt.PyJWTError):
        raise SignInRefused(
            "unknown_key", "the ID token is signed by a key the provider does not publish"
        ) from None
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=[header["alg"]],
            audience=provider.client_id,
            issuer=provider.issuer,
            leeway=CLOCK_SKEW_SECONDS,
            options={"require": ["iss", "aud", "sub", "exp", "iat"]},
        )
    except jwt.InvalidSignatureError:
        raise SignInRefused("bad_signature", "the ID token's signature does not verify") from None
    except jwt.ExpiredSignatureError:
        raise SignInRefused("expired", "the ID token has expired") from None
    except jwt.InvalidAudienceError:
        raise SignInRefused("wrong_audience", "the ID token was issued for another client") from None
    except jwt.InvalidIssuerError:
        raise SignInRefused("wrong_issuer", "the ID token was issued by another provider") from None
    except jwt.PyJWTError as error:
        raise SignInRefused("bad_token", f"the ID token is not valid ({error})") from None
    audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    if len(audiences) > 1 and claims.get("azp") != provider.client_id:
        raise SignInRefused("wrong_audience", "the ID token names other audiences and not us as its party")
    if not nonce or not hmac.compare_digest(str(claims.get("nonce", "")), nonce):
        raise SignInRefused("bad_nonce", "the ID token's nonce is not this sign-in's (a replayed token?)")
    return claims
