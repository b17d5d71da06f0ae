"""Sign-in throttling with django-axes: failures are counted per account and per client address (a wrong
password and, counted here too, a right password with a wrong one-time code). At the limit that account,
or that address, is refused for a short cool-down (SIGN_IN_COOL_OFF_SECONDS), with the very page a wrong
password gets, so a guesser learns nothing. The cool-down is short so that an attacker's failures keep the
person out only briefly; a successful sign-in clears the count.

Throttling is audited in aggregate: one `sign_in.throttled` event when an account or address reaches the
limit, not one per refused attempt (axes counts those in its own tables).
"""

from datetime import timedelta

from django.conf import settings
from django.contrib.auth.signals import user_login_failed
from django.utils import timezone

from accounts.devices import record_sign_in_throttled


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


def record_lockout(sender, request, username, ip_address, **kwargs) -> None:
    """axes' user_locked_out, sent on the attempt that reaches the limit and on every refused attempt
    after it: recorded once per account and address per cool-down."""
    record_sign_in_throttled(
        username=(username or "")[:150],
        address=ip_address or "",
        since=timezone.now() - cool_off(),
        failure_limit=settings.AXES_FAILURE_LIMIT,
        cool_off_seconds=settings.SIGN_IN_COOL_OFF_SECONDS,
    )
