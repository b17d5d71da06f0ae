"""Where the gate finds Reviewer's public keys: a JWKS held in memory, or fetched and cached."""

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from reviewer_gate.decision import ALGORITHMS, GateError


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


class JWKSKeySource:
    """Keys from Reviewer's `/.well-known/jwks.json`, cached for `cache_seconds`.

    An unknown kid triggers one refresh (Reviewer may have rotated its key) and is refused if still
    unknown. Refreshes for unknown kids are at most one per `min_refresh_seconds`, so a stream of
    forged tokens with random kids cannot turn this agent into a JWKS request amplifier.
    A JWKS that cannot be fetched fails closed (`keys_unavailable`).

    Over HTTP it keeps one client for all its refreshes (`close()` drops it; the next refresh opens a
    new one): a refresh happens on the request path, under the lock every verification takes, and a
    new httpx client costs tens of milliseconds (its TLS context) before the request is even sent.
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
        self._fetch = fetch or self._fetch_over_http
        self._lock = threading.Lock()
        self._http: httpx.Client | None = None  # made by the first refresh over HTTP, kept for the next
        self._keys: dict[str, Ed25519PublicKey] = {}
        self._fetched_at: float | None = None
        self.fetch_count = 0

    def close(self) -> None:
        """Close the kept HTTP client (the next refresh opens a new one)."""
        with self._lock:
            client, self._http = self._http, None
        if client is not None:
            client.close()

    def _fetch_over_http(self, url: str, timeout: float) -> dict[str, Any]:
        # Called by _refresh, under self._lock: one refresh at a time uses the kept client.
        if self._http is None:
            self._http = httpx.Client(timeout=timeout)
        response = self._http.get(url, headers={"Accept": "application/json"})
        response.raise_for_status()
        document = response.json()
        return document if isinstance(document, dict) else {}  # a JWKS that is no object holds no keys

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
