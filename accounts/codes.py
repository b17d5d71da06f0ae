"""Checking the one-time code typed at sign-in."""

from django.db import transaction
from django_otp import devices_for_user
from django_otp.plugins.otp_static.models import StaticDevice


def verify_sign_in_code(user, code: str, *, backup_only: bool = False):
    """The device that accepts `code` at sign-in, or None; with `backup_only`, only a backup code (what an
    account past its sign-in limit accepts, accounts/throttle.py). Like django-otp's match_token (device rows
    locked, the used step saved, so a code signs in once), except that the device's own exponential
    back-off is not applied: sign-in attempts are already limited per account and per address by
    django-axes with a short cool-down, and the back-off, which only grows until a success, would let
    someone who knows the password lock the person out for hours by guessing codes."""
    with transaction.atomic():
        for device in devices_for_user(user, confirmed=True, for_verify=True):
            if backup_only and not isinstance(device, StaticDevice):
                continue
            device.throttle_reset(commit=False)
            if device.verify_token(code):
                return device
    return None
