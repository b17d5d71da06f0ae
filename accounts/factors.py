"""Which factor a change to a person's factors needs, and the short confirmation that proves it.

Signing in proves the password and one factor, possibly hours ago and possibly phished: it is not enough
to add a factor, or someone with a phished password and one code would add their own passkey and then
pass every passkey-only policy. So adding a passkey or an authenticator app, new backup codes and
removing a passkey need a confirmation made just now on Your devices (FACTOR_CHANGE_WINDOW_SECONDS, in
the session, signed) with a factor at least as strong as the strongest the person has: an established
passkey once they have one, a code from the authenticator app while that is their strongest, a backup
code only for someone who has nothing else. Whoever lost the factor that is needed asks an admin to
reset their devices (devices.reset_devices) and enrolls again.

A passkey in its cool-off (passkeys.cool_off_until) is no stronger than an authenticator code: its
registration rested on one.
"""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core import signing
from django.utils import timezone

from accounts import passkeys, stepup

BACKUP_CODE = "backup_code"
TOTP = "totp"
NEW_PASSKEY = "new_passkey"
PASSKEY = "passkey"

STRENGTH = {BACKUP_CODE: 1, TOTP: 2, NEW_PASSKEY: 2, PASSKEY: 3}

# What the person is asked for, by the factor a change needs.
ASK_FOR = {
    BACKUP_CODE: "one of your backup codes",
    TOTP: "a code from your authenticator app",
    NEW_PASSKEY: "one of your passkeys",
    PASSKEY: "one of your passkeys",
}
# Why, in the same terms.
BECAUSE = {
    BACKUP_CODE: "backup codes are the only factor you have",
    TOTP: "your authenticator app is your strongest factor (a backup code is weaker)",
    NEW_PASSKEY: "a passkey is your strongest factor (it counts like a code while it is new)",
    PASSKEY: "you have a passkey, so a change to your factors must not rest on anything weaker: a "
    "stolen password and code must never be enough to add one",
}

SESSION_KEY = "reviewer_factor_confirmed"
_SALT = "reviewer.factor_confirmed"


@dataclass(frozen=True)
class Confirmation:
    """A factor the person used on Your devices just now: `method` is a key of STRENGTH."""

    method: str
    at: datetime


def factors_of(user) -> list[str]:
    """The kinds of second factor the person has now (confirmed devices; backup codes while any is left)."""
    from django_otp.plugins.otp_static.models import StaticToken
    from django_otp.plugins.otp_totp.models import TOTPDevice
    from django_otp_webauthn.models import WebAuthnCredential

    kinds = []
    if TOTPDevice.objects.filter(user=user, confirmed=True).exists():
        kinds.append(TOTP)
    if StaticToken.objects.filter(device__user=user, device__confirmed=True).exists():
        kinds.append(BACKUP_CODE)
    for device in WebAuthnCredential.objects.filter(user=user, confirmed=True):
        kinds.append(passkey_kind(device))
    return kinds


def passkey_kind(device) -> str:
    return NEW_PASSKEY if passkeys.cool_off_until(device) is not None else PASSKEY


def needed_for_change(user) -> str | None:
    """The factor a change to this person's factors needs (a key of ASK_FOR; any as strong will do), or
    None for someone who has none yet (their first enrollment needs only the password)."""
    kinds = factors_of(user)
    if not kinds:
        return None
    strongest = max(STRENGTH[kind] for kind in kinds)
    # Of two factors as strong, the one people have most often is named (either confirms).
    return next(
        kind
        for kind in (PASSKEY, TOTP, NEW_PASSKEY, BACKUP_CODE)
        if kind in kinds and STRENGTH[kind] == strongest
    )


def refusal(user, confirmation: Confirmation | None, what: str) -> str | None:
    """Why `confirmation` does not allow `what` ("adding a passkey", ...) for this person, in words that
    name the factor needed and why; None when it does."""
    needed = needed_for_change(user)
    if needed is None:
        return None
    if confirmation is not None and STRENGTH.get(confirmation.method, 0) >= STRENGTH[needed]:
        return None
    if confirmation is None:
        said = "being signed in is not enough"
    else:
        said = f"you confirmed with {describe(confirmation.method)}, which is weaker"
    return (
        f"{what.capitalize()} needs you to confirm with {ASK_FOR[needed]} first, under “Confirm it is "
        f"you” ({said}): {BECAUSE[needed]}. Lost it? A tenant admin can reset your devices."
    )


def describe(method: str) -> str:
    return {NEW_PASSKEY: "a passkey added less than a day ago"}.get(method) or ASK_FOR.get(method, method)


def confirm(user, session, *, code: str = "", passkey=None) -> Confirmation | None:
    """Check a code or a passkey answer to the person's confirm challenge; a good one is kept in the
    session for FACTOR_CHANGE_WINDOW_SECONDS (the caller saves a session that is not a request's). A used
    code is used up, as at sign-in; django-otp throttles wrong ones."""
    if passkey:
        device = passkeys.verify_confirm(user, passkey)
        method = passkey_kind(device) if device is not None else None
    else:
        method = stepup.verify_code(user, code)
    if method is None:
        return None
    signer = signing.TimestampSigner(salt=_SALT)
    session[SESSION_KEY] = signer.sign(f"{session.session_key or 'session'}:{method}")
    return Confirmation(method, timezone.now())


def confirmation_in(session) -> Confirmation | None:
    """The session's confirmation while it is younger than FACTOR_CHANGE_WINDOW_SECONDS, else None."""
    value = session.get(SESSION_KEY) if session is not None else None
    if not value:
        return None
    signer = signing.TimestampSigner(salt=_SALT)
    try:
        bound = signer.unsign(value, max_age=settings.FACTOR_CHANGE_WINDOW_SECONDS)
    except signing.BadSignature:
        return None
    session_key, _, method = bound.rpartition(":")
    if session_key != (session.session_key or "session") or method not in STRENGTH:
        return None
    at = datetime.fromtimestamp(signing.b62_decode(value.rsplit(signer.sep, 2)[1]), UTC)
    return Confirmation(method, at)


def confirmed_until(confirmation: Confirmation | None) -> datetime | None:
    if confirmation is None:
        return None
    return confirmation.at + timedelta(seconds=settings.FACTOR_CHANGE_WINDOW_SECONDS)
