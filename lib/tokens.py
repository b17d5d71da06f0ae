"""Secrets for agents (push and API tokens) and the hash a row keeps of them (never the token itself)."""

import hashlib
import hmac
import secrets


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A secret for an agent (push or API token). Never starting with "-": printed by register_agent, it
    is pasted into command lines, where a leading "-" reads as an option."""
    while True:
        token = secrets.token_urlsafe(32)
        if not token.startswith("-"):
            return token


def bearer_matches(authorization: str, token: str) -> bool:
    """Whether an Authorization header value is `Bearer <token>`, compared in constant time; never for
    an empty token (an unset secret turns its endpoint's extras off, it does not open them)."""
    return bool(token) and hmac.compare_digest(authorization.encode(), f"Bearer {token}".encode())
