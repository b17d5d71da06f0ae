"""Sign-in throttling, in two tiers. Failures (a wrong password and, counted here too, a right password
with a wrong one-time code) are counted by django-axes per pair (account, client address) and per client
address: at SIGN_IN_FAILURE_LIMIT that pair, or that address, is refused for SIGN_IN_COOL_OFF_SECONDS.
So a guesser at one address locks out only themselves: the person signs in from their own address.
Attempts refused during a cool-down are not counted and do not extend it.

Across all addresses an account is limited more slowly (SIGN_IN_ACCOUNT_FAILURE_LIMIT failures within
SIGN_IN_ACCOUNT_WINDOW_SECONDS, counted since the last successful sign-in): past it, a distributed guess
gets nowhere, because the account then signs in only with a factor that cannot be guessed, a passkey or
a backup code (never with the six-digit code). Such a sign-in unlocks the account: a success starts the
count again.

Every limit counts a name as `sign_in_name` spells it (Unicode NFKC, trimmed, case-folded): `' pat'`,
`'Pat'` and a fullwidth `ｐａｔ` are one count, whatever the guesser types. (Signing in compares the
username exactly after NFKC and trimming, as Django's form does: case matters there, not for the limits.)

Every refusal is the page a wrong password gets, so a guesser learns nothing. Throttling is audited in
aggregate: one `sign_in.throttled` event when a pair or address reaches the limit, one when an account
does, and `sign_in.unlocked` when a person unlocks theirs, never one per refused attempt.
"""

import unicodedata
from datetime import timedelta

from axes.models import AccessFailureLog, AccessLog
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_login_failed
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from accounts.devices import person_chains, record_for_person, record_sign_in_throttled
from audit.labels import SYSTEM, actor_label, user_label
from audit.models import AuditEvent, Verb
from audit.trail import record


def sign_in_name(typed: str | None) -> str:
    """The one spelling of a typed username that every limit counts under."""
    return unicodedata.normalize("NFKC", typed or "").strip().casefold()[:150]


def axes_username(request, credentials) -> str:
    """AXES_USERNAME_CALLABLE: axes counts failures and successes under `sign_in_name`, not as typed."""
    typed = (credentials or {}).get("username")
    if typed is None and request is not None:
        typed = request.POST.get("username")
    return sign_in_name(typed)


def client_address(request) -> str | None:
    """The address failures are counted under: REMOTE_ADDR, the connection's peer, or the client a
    TRUSTED_PROXIES proxy names (reviewer/proxies.py). A header the client sends is never read here, so
    it cannot pick a fresh address per guess. None when there is none (a request built in code, e.g. a
    test's force_login); axes stores addresses in an IP column, so no placeholder text."""
    return request.META.get("REMOTE_ADDR") or None


def count_code_failure(request, username: str) -> None:
    """A right password with a wrong code counts like a wrong password (axes listens to this signal)."""
    user_login_failed.send(sender=__name__, credentials={"username": username}, request=request)


def cool_off() -> timedelta:
    return timedelta(seconds=settings.SIGN_IN_COOL_OFF_SECONDS)


def account_window() -> timedelta:
    return timedelta(seconds=settings.SIGN_IN_ACCOUNT_WINDOW_SECONDS)


def _count_since(username: str):
    """Where the account's count starts: the window's start, or its last successful sign-in if later."""
    since = timezone.now() - account_window()
    last_success = AccessLog.objects.filter(username=sign_in_name(username)).aggregate(
        at=Max("attempt_time")
    )["at"]
    return max(since, last_success) if last_success else since


def account_failures(username: str) -> int:
    """Counted failures of `username` from every address (axes' failure log: refused attempts are not
    in it)."""
    return AccessFailureLog.objects.filter(
        username=sign_in_name(username), attempt_time__gt=_count_since(username)
    ).count()


def account_locked(username: str | None) -> bool:
    """True while `username` signs in only with a passkey or a backup code (see the module docstring)."""
    if not username:
        return False
    return account_failures(username) >= settings.SIGN_IN_ACCOUNT_FAILURE_LIMIT


def record_lockout(sender, request, username, ip_address, **kwargs) -> None:
    """axes' user_locked_out, sent on the attempt that reaches the limit of a pair or an address and on
    every refused attempt after it: recorded once per account and address per cool-down."""
    record_sign_in_throttled(
        username=(username or "")[:150],
        address=ip_address or "",
        since=timezone.now() - cool_off(),
        failure_limit=settings.AXES_FAILURE_LIMIT,
        cool_off_seconds=settings.SIGN_IN_COOL_OFF_SECONDS,
    )


def record_account_lock(username: str) -> bool:
    """One `sign_in.throttled` event (data `"limit": "account"`) when `username` reaches the account
    limit, in the person's tenants (the system chain for an unknown name); not again while it holds.
    Returns whether it recorded."""
    username = sign_in_name(username)
    person = get_user_model().objects.filter(username__iexact=username).first()
    # A person by pseudonym (erasable); a name nobody has is kept as typed.
    subject = user_label(person) if person is not None else f"sign_in:{username}"
    with transaction.atomic():
        if AuditEvent.objects.filter(
            subject=subject, verb=Verb.SIGN_IN_THROTTLED, at__gt=_count_since(username), data__limit="account"
        ).exists():
            return False
        data = {
            "limit": "account",
            "failure_limit": settings.SIGN_IN_ACCOUNT_FAILURE_LIMIT,
            "window_seconds": settings.SIGN_IN_ACCOUNT_WINDOW_SECONDS,
        }
        for tenant_id in person_chains(person) if person is not None else [None]:
            record(tenant_id, actor=SYSTEM, verb=Verb.SIGN_IN_THROTTLED, subject=subject, data=data)
    return True


def record_unlocked(user, *, factor: str) -> None:
    """The person signed in past the account limit with `factor` ("passkey" or "backup code")."""
    with transaction.atomic():
        record_for_person(user, actor=actor_label(user), verb=Verb.SIGN_IN_UNLOCKED, data={"factor": factor})
