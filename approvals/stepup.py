"""Step-up authentication for votes. django-otp's is_verified() lasts the whole session, so it is not
step-up: a vote needs either a fresh one-time code (per_vote) or a signed step-up time in the session
younger than the policy's window. Codes go through the devices' own verify_token, which throttles
failures and refuses a TOTP code already used (last_t), so a code is usable once.
"""

from django.core import signing
from django_otp import devices_for_user

SESSION_KEY = "reviewer_step_up"
_SALT = "reviewer.step_up"


def verify_code(user, code: str) -> str | None:
    """Check a one-time code against the user's confirmed devices; returns the method used or None."""
    code = (code or "").strip().replace(" ", "")
    if not code:
        return None
    for device in devices_for_user(user, confirmed=True):
        if device.verify_token(code):
            return "totp" if device.__class__.__name__ == "TOTPDevice" else "backup_code"
    return None


def mark_fresh(session) -> None:
    session[SESSION_KEY] = signing.TimestampSigner(salt=_SALT).sign(str(session.session_key or "session"))


def fresh_within(session, window_seconds: int) -> bool:
    value = session.get(SESSION_KEY) if session is not None else None
    if not value:
        return False
    try:
        signing.TimestampSigner(salt=_SALT).unsign(value, max_age=window_seconds)
    except signing.BadSignature:  # includes SignatureExpired
        return False
    return True


def user_has_device(user) -> bool:
    return any(True for _ in devices_for_user(user, confirmed=True))
