"""A resource's challenge-signing keys: public JWKs, Ed25519 (EdDSA) or P-256 (ES256).

Registration stores a JWK Set; verifying a challenge picks the key its header's `kid` names (or the
only key, when the set has one and the header names none) and accepts only the algorithm that key is
for, so a header cannot switch an EC key to another algorithm."""

from typing import Any

import jwt

ALGORITHM_FOR = {("OKP", "Ed25519"): "EdDSA", ("EC", "P-256"): "ES256"}
PRIVATE_MEMBERS = {"d", "p", "q", "dp", "dq", "qi", "k"}


class KeyRefused(ValueError):
    pass


def key_algorithm(jwk: dict[str, Any]) -> str:
    algorithm = ALGORITHM_FOR.get((str(jwk.get("kty")), str(jwk.get("crv"))))
    if algorithm is None:
        raise KeyRefused("only OKP/Ed25519 (EdDSA) and EC/P-256 (ES256) keys sign challenges")
    if jwk.get("alg") not in (None, algorithm):
        raise KeyRefused(f"a {jwk.get('kty')}/{jwk.get('crv')} key has alg {algorithm}")
    return algorithm


def public_jwks(document: dict[str, Any]) -> dict[str, Any]:
    """A JWK Set of public challenge keys, from a JWK Set or one JWK; refuses private members."""
    if not isinstance(document, dict):
        raise KeyRefused("a JWK or a JWK Set is a JSON object")
    keys = document.get("keys") if "keys" in document else [document]
    if not isinstance(keys, list) or not keys:
        raise KeyRefused("the JWK Set has no keys")
    checked = []
    for jwk in keys:
        if not isinstance(jwk, dict):
            raise KeyRefused("a JWK is a JSON object")
        if PRIVATE_MEMBERS & set(jwk):
            raise KeyRefused("a private key was given: register the public key only")
        key_algorithm(jwk)
        try:
            jwt.PyJWK(jwk)
        except jwt.PyJWTError as error:
            raise KeyRefused(f"not a usable key: {error}") from error
        checked.append(jwk)
    kids = [jwk.get("kid") for jwk in checked]
    if len(checked) > 1 and (None in kids or len(set(kids)) != len(kids)):
        raise KeyRefused("a JWK Set of several keys names each by a distinct kid")
    return {"keys": checked}


def key_for(jwks: dict[str, Any], kid: str | None) -> tuple[jwt.PyJWK, str] | None:
    """The key the header names, with its algorithm; None when the set has no such key."""
    keys = jwks.get("keys") or []
    if kid is None:
        chosen = keys[0] if len(keys) == 1 else None
    else:
        chosen = next((jwk for jwk in keys if jwk.get("kid") == kid), None)
    if chosen is None:
        return None
    algorithm = key_algorithm(chosen)
    return jwt.PyJWK(chosen, algorithm=algorithm), algorithm
