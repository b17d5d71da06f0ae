"""A protected resource's side, by hand, for the tests: its challenge-signing key and the challenges
it signs (draft-rosomakho-oauth-txn-challenge-00 §4.2), built with PyJWT and cryptography only."""

import json
import time
import uuid
from dataclasses import dataclass, field

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

RESOURCE_AUDIENCE = "https://refunds.example.test"
REFUND_DETAIL = {"type": "refund", "order_id": "1182", "amount": "740.00", "currency": "EUR"}


@dataclass
class ChallengeKey:
    kind: str = "Ed25519"
    kid: str = "refunds-1"
    private: ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey = field(init=False)

    def __post_init__(self):
        self.private = (
            ed25519.Ed25519PrivateKey.generate()
            if self.kind == "Ed25519"
            else ec.generate_private_key(ec.SECP256R1())
        )

    @property
    def algorithm(self) -> str:
        return "EdDSA" if self.kind == "Ed25519" else "ES256"

    def public_jwk(self) -> dict:
        public = self.private.public_key()
        if isinstance(public, ed25519.Ed25519PublicKey):
            jwk = json.loads(jwt.algorithms.OKPAlgorithm.to_jwk(public))
        else:
            jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(public))
        return {**jwk, "kid": self.kid, "alg": self.algorithm, "use": "sig"}

    def sign(self, claims: dict, **header) -> str:
        algorithm = header.pop("alg", self.algorithm)
        headers = {"typ": "txn-authz-challenge+jwt", "kid": self.kid, **header}
        return jwt.encode(claims, self.private, algorithm=algorithm, headers=headers)


def challenge_claims(issuer: str, **overrides) -> dict:
    now = int(time.time())
    claims = {
        "iss": RESOURCE_AUDIENCE,
        "aud": issuer,
        "iat": now,
        "exp": now + 300,
        "jti": str(uuid.uuid4()),
        "txn": str(uuid.uuid4()),
        "authorization_details": [dict(REFUND_DETAIL)],
        "reason": "Refunds over EUR 500 need two people",
        "act": {"sub": "agent:refund-bot"},
    }
    claims.update(overrides)
    return {key: value for key, value in claims.items() if value is not None}
