"""The resource's transaction authorization challenge (draft-rosomakho-oauth-txn-challenge-00, section 4):
a JWT signed with the resource's own Ed25519 key, and the `txn` that binds a later token to it.

Why `txn` needs no store. The resource must recognise, on the retry, that a token answers a challenge
it issued for this very request and caller. The `txn` is therefore a random nonce followed by an HMAC
(keyed from the resource's private key) over the nonce and the request's binding (its authorization
details, its caller, its exact method, path, query and body bytes): recomputed from the retried
request, it matches only for the same request by the same caller, in any process that holds the key.
Single use is the token's (its `jti`, consumed at Reviewer), not the txn's.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
import uuid
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from jwt.algorithms import OKPAlgorithm

CHALLENGE_TYPE = "txn-authz-challenge+jwt"
CHALLENGE_ALGORITHM = "EdDSA"


class ResourceKey:
    """The resource's Ed25519 key: signs its challenges, keys its txn MACs. Its public half is what
    Reviewer's registration of the resource holds (or fetches from `jwks()` served by the guard)."""

    def __init__(self, private_key: Ed25519PrivateKey, kid: str | None = None):
        self.private_key = private_key
        raw = private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.kid = kid or "ed25519-" + hashlib.sha256(raw).hexdigest()[:16]
        private_raw = private_key.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
        # A separate key for the MACs, derived so that one file holds everything the resource signs with.
        self._txn_key = hmac.new(private_raw, b"reviewer-gate txn v1", hashlib.sha256).digest()

    @classmethod
    def generate(cls) -> ResourceKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_pem(cls, pem: bytes, kid: str | None = None) -> ResourceKey:
        key = serialization.load_pem_private_key(pem, password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError("the resource key must be an Ed25519 private key (PEM, PKCS#8)")
        return cls(key, kid)

    @classmethod
    def from_file(cls, path: str | Path, *, create: bool = False) -> ResourceKey:
        """Load the key from a PEM file; with `create`, make one (mode 0600) when the file is missing."""
        path = Path(path)
        if not path.exists() and create:
            key = cls.generate()
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as file:
                file.write(key.pem())
            return key
        return cls.from_pem(path.read_bytes())

    def pem(self) -> bytes:
        return self.private_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def public_pem(self) -> str:
        return (
            self.private_key.public_key()
            .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
            .decode()
        )

    def jwk(self) -> dict[str, Any]:
        public: dict[str, Any] = json.loads(OKPAlgorithm.to_jwk(self.private_key.public_key()))
        return {**public, "kid": self.kid, "alg": CHALLENGE_ALGORITHM, "use": "sig"}

    def jwks(self) -> dict[str, Any]:
        return {"keys": [self.jwk()]}

    # txn ------------------------------------------------------------------------------------------

    def _txn_mac(self, nonce: str, binding: str) -> str:
        return hmac.new(self._txn_key, f"{nonce}\n{binding}".encode(), hashlib.sha256).hexdigest()

    def new_txn(self, binding: str) -> str:
        """A fresh txn bound to `binding` (what the request is: see guard.transaction_binding); unique
        through its 128-bit nonce."""
        nonce = secrets.token_urlsafe(16)
        return f"{nonce}.{self._txn_mac(nonce, binding)}"

    def txn_is_for(self, txn: str, binding: str) -> bool:
        """True when `txn` was made by this key for this `binding`."""
        nonce, _, mac = txn.partition(".")
        if not nonce or not mac:
            return False
        return hmac.compare_digest(mac, self._txn_mac(nonce, binding))

    # the challenge --------------------------------------------------------------------------------

    def challenge(
        self,
        *,
        issuer: str,
        authorization_server: str,
        authorization_details: list[dict[str, Any]],
        reason: str,
        caller_sub: str | None,
        binding: str,
        lifetime_seconds: int = 300,
        now: int | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """(the signed challenge JWT, its claims). `issuer` is the resource's identifier (the audience of
        the token that answers it); `authorization_server` is Reviewer's issuer (the challenge's aud)."""
        now = int(time.time()) if now is None else now
        claims: dict[str, Any] = {
            "iss": issuer,
            "aud": authorization_server,
            "iat": now,
            "exp": now + lifetime_seconds,
            "jti": str(uuid.uuid4()),
            "txn": self.new_txn(binding),
            "authorization_details": authorization_details,
            "reason": reason,
        }
        if caller_sub is not None:
            claims["act"] = {"sub": caller_sub}
        token = jwt.encode(
            claims,
            self.private_key,
            algorithm=CHALLENGE_ALGORITHM,
            headers={"kid": self.kid, "typ": CHALLENGE_TYPE},
        )
        return token, claims
