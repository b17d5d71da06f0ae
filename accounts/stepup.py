"""Step-up authentication for votes. django-otp's is_verified() lasts the whole session, so it is not
step-up: a vote needs either a fresh one-time code (per_vote) or a signed step-up time in the session
younger than the policy's window. Codes go through django-otp's match_token, which locks the person's
device rows (select_for_update) while a device's verify_token checks the code, throttles failures and
saves the step it used (last_t): two requests carrying one code are serialized on the device row, and the
second sees the step already used, so a code is usable once even when sent to several proposals at once.

A passkey (accounts/passkeys.py) answers a challenge made for one proposal and one action digest; its
challenge is usable once and its signature counter must advance. Its StepUp carries what it was bound to,
and the services accept it only for that proposal and digest. A passkey added recently (its cool-off,
PASSKEY_COOL_OFF_SECONDS) says so in its StepUp, and a passkey-only policy refuses it.

The view or consumer checks the code or the passkey (`step_up_for`, which touches the session) and hands
the services a `StepUp`; the services decide whether it satisfies the proposal's policy and never see the
session.
"""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.core import signing
from django.utils import timezone
from django_otp import devices_for_user, match_token

from accounts import passkeys

SESSION_KEY = "reviewer_step_up"
_SALT = "reviewer.step_up"


# StepUp.method when no code came with this request but the session stepped up earlier.
SESSION = "session"
# StepUp.method when a passkey answered this vote's challenge.
PASSKEY = "passkey"


@dataclass(frozen=True)
class StepUp:
    """What a person proved for one request: a one-time code checked now ("totp" or "backup_code"), a
    passkey now ("passkey", for the (proposal id, action digest) in `bound_to`), or an earlier step-up in
    this session ("session", at `verified_at`). An empty method means something was given and refused."""

    method: str
    verified_at: datetime | None
    bound_to: tuple[str, str] | None = None
    # A passkey still in its cool-off (accounts/passkeys.cool_off_until): when it ends. Such a passkey
    # counts like a code: it does not satisfy a policy that accepts only passkeys.
    cool_off_until: datetime | None = None

    @property
    def refused(self) -> bool:
        return not self.method


def step_up_for(
    user, otp_code: str, session=None, *, passkey=None, proposal_id=None, digest: str = ""
) -> StepUp | None:
    """Check the passkey answer or the code that came with a request. A good one marks the session fresh
    (the caller saves the session if it is not a request's); without either, the session's signed
    step-up time counts. None when the person offered nothing. A passkey answer is checked against the
    proposal and digest the request is for (`proposal_id`, `digest`)."""
    if passkey:
        device = None if proposal_id is None else passkeys.verify_vote(user, passkey, proposal_id, digest)
        if device is None:
            return StepUp("", None)
        if session is not None:
            mark_fresh(session)
        return StepUp(
            PASSKEY,
            timezone.now(),
            bound_to=(str(proposal_id), digest),
            cool_off_until=passkeys.cool_off_until(device),
        )
    if (otp_code or "").strip():
        method = verify_code(user, otp_code)
        if method is None:
            return StepUp("", None)
        if session is not None:
            mark_fresh(session)
        return StepUp(method, timezone.now())
    at = fresh_at(session)
    return StepUp(SESSION, at) if at is not None else None


def verify_code(user, code: str) -> str | None:
    """Check a one-time code against the user's confirmed devices; returns the method used or None."""
    code = (code or "").strip().replace(" ", "")
    if not code:
        return None
    # match_token: in one transaction, devices_for_user(for_verify=True) then verify_token on each.
    device = match_token(user, code)
    if device is None:
        return None
    return "totp" if device.__class__.__name__ == "TOTPDevice" else "backup_code"


def mark_fresh(session) -> None:
    session[SESSION_KEY] = signing.TimestampSigner(salt=_SALT).sign(str(session.session_key or "session"))


def fresh_at(session) -> datetime | None:
    """When this session last stepped up (its signed time), or None if never or the signature is forged."""
    value = session.get(SESSION_KEY) if session is not None else None
    if not value:
        return None
    signer = signing.TimestampSigner(salt=_SALT)
    try:
        signer.unsign(value)
    except signing.BadSignature:
        return None
    stamp = value.rsplit(signer.sep, 2)[1]
    return datetime.fromtimestamp(signing.b62_decode(stamp), UTC)


def fresh_within(session, window_seconds: int) -> bool:
    at = fresh_at(session)
    return at is not None and timezone.now() - at <= timedelta(seconds=window_seconds)


def user_has_device(user) -> bool:
    return any(True for _ in devices_for_user(user, confirmed=True))


# StepUp.method when the tenant's identity provider confirmed this vote by a fresh sign-in.
IDP = "idp"


@dataclass(frozen=True)
class ProviderStepUp(StepUp):
    """A fresh sign-in at the tenant's identity provider for the (proposal id, action digest) in
    `bound_to` (sso/oidc/idp_step_up.py checked it), with the acr and amr its ID token carried."""

    acr: str = ""
    amr: tuple[str, ...] = ()

    def detail(self) -> dict:
        """What the decision token adds to approvers[].auth for this vote."""
        return {"acr": self.acr, "amr": list(self.amr)}
