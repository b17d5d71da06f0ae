"""A vote's step-up by a fresh sign-in at the tenant's identity provider (IdentityProvider.step_up "idp").

Signing in through the provider never satisfies a vote's step-up: that session is hours old. Here the
person is sent to the provider again with `prompt=login` and `max_age=0` (and the tenant's `acr_values`),
and the ID token that comes back must show a new authentication (`auth_time` after the request), the acr
and amr the tenant names, the same person (issuer and subject), and a nonce that commits to the proposal
and the action digest being approved: nonce = random "." SHA-256(random, proposal id, digest). What it
proved is kept, signed, in the session for that proposal and digest, usable once within a few minutes;
approvals/stepup.py takes it for the vote and the decision token records it in approvers[].auth as
{"method": "idp", "acr": …, "amr": […]}.

The request goes out through sso/oidc/views.py's `redirect_to_provider` with `extra_params`; the callback's
backend (sso/oidc/backend.py) hands the ID token's claims to `complete`. This module imports no
approvals: approvals/stepup.py imports it.
"""

import hashlib
import hmac
import secrets
import time

from django.core import signing

from sso.errors import SignInRefused
from sso.models import ExternalIdentity

SESSION_KEY = "sso_step_up"
_SALT = "reviewer.sso.step_up"
USABLE_SECONDS = 300  # between the provider's answer and the vote
AUTH_TIME_SKEW_SECONDS = 30


def _binding(random: str, proposal_id: str, digest: str) -> str:
    return hashlib.sha256(f"{random}\n{proposal_id}\n{digest}".encode()).hexdigest()


def bound_nonce(proposal_id: str, digest: str) -> str:
    random = secrets.token_urlsafe(24)
    return f"{random}.{_binding(random, str(proposal_id), digest)}"


def nonce_binds(nonce: str, proposal_id: str, digest: str) -> bool:
    random, _, binding = (nonce or "").partition(".")
    return bool(random) and hmac.compare_digest(binding, _binding(random, str(proposal_id), digest))


def extra_params(provider, proposal_id, digest: str) -> dict:
    """What the redirect to the provider asks besides the library's own parameters: a new authentication
    (`prompt=login`, `max_age=0`), the tenant's acr values, and a nonce bound to the proposal and digest
    (the library keeps it with the state, as it would its own random one, for the callback's check)."""
    params = {"prompt": "login", "max_age": "0"}
    if provider.step_up_acr.strip():
        params["acr_values"] = provider.step_up_acr.strip()
    params["nonce"] = bound_nonce(proposal_id, digest)
    return params


def complete(request, provider, claims: dict, pending: dict) -> dict:
    """Check that the ID token is this person's fresh re-authentication for this proposal and digest;
    keep what it proved in the session and return it. SignInRefused, changing nothing, otherwise."""
    subject = claims.get(provider.subject_claim)
    identity = ExternalIdentity.objects.at(provider, str(subject or "")).first()
    if identity is None or identity.user_id != pending["user"]:
        raise SignInRefused(
            "other_person", "the provider confirmed someone else, not the person voting", provider
        )
    if not nonce_binds(str(claims.get("nonce", "")), pending["proposal"], pending["digest"]):
        raise SignInRefused(
            "unbound_nonce", "this confirmation was not made for this proposal and version", provider
        )
    auth_time = claims.get("auth_time")
    if not isinstance(auth_time, int | float) or auth_time < pending["started"] - AUTH_TIME_SKEW_SECONDS:
        raise SignInRefused(
            "not_fresh", "the provider did not ask you to sign in again (no fresh auth_time)", provider
        )
    acr = claims.get("acr") or ""
    allowed_acr = provider.step_up_acr.split()
    if allowed_acr and acr not in allowed_acr:
        raise SignInRefused(
            "weak_acr", f"the provider's sign-in ({acr or 'no acr'}) is not one this tenant accepts", provider
        )
    amr = claims.get("amr") or []
    if not isinstance(amr, list):
        amr = [amr]
    missing = [method for method in provider.step_up_amr.split() if method not in amr]
    if missing:
        raise SignInRefused("weak_amr", f"the provider's sign-in did not use {', '.join(missing)}", provider)
    proved = {
        "proposal": str(pending["proposal"]),
        "digest": pending["digest"],
        "acr": str(acr)[:100],
        "amr": [str(method)[:50] for method in amr][:10],
        "at": int(time.time()),
    }
    request.session[SESSION_KEY] = signing.dumps(proved, salt=_SALT)
    return proved


def held(session, proposal_id, digest: str) -> bool:
    """Whether the session holds a usable confirmation for this proposal and digest (without using it)."""
    value = session.get(SESSION_KEY) if session is not None else None
    try:
        proved = signing.loads(value, salt=_SALT, max_age=USABLE_SECONDS) if value else None
    except signing.BadSignature:
        return False
    return proved is not None and (proved["proposal"], proved["digest"]) == (str(proposal_id), digest)


def take(session, proposal_id, digest: str) -> dict | None:
    """The provider's fresh confirmation for this proposal and digest, removed from the session (usable
    once); None when there is none, it is for something else, forged, or older than USABLE_SECONDS."""
    if session is None or not session.get(SESSION_KEY):
        return None
    value = session.pop(SESSION_KEY)
    try:
        proved = signing.loads(value, salt=_SALT, max_age=USABLE_SECONDS)
    except signing.BadSignature:
        return None
    if proved["proposal"] != str(proposal_id) or proved["digest"] != digest:
        return None
    return proved
