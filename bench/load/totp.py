"""Codes from a reviewer's device secret, as their authenticator app shows them (the load test's users
and WebSocket watchers sign in and step up with these)."""

import time

from django_otp.oath import TOTP


def code_for(key_hex: str, last_t: list) -> str:
    """The device's code now; the next step's if this step's was already used by this caller (django-otp
    accepts one step ahead and refuses a code it has seen). `last_t` is the caller's one-item memory."""
    totp = TOTP(bytes.fromhex(key_hex), 30, 0, 6, 0)
    totp.time = time.time()
    if totp.t() <= last_t[0]:
        totp.time += 30 * (last_t[0] + 1 - totp.t())
    last_t[0] = totp.t()
    return f"{totp.token():06d}"


def code_now(key_hex: str) -> str:
    return code_for(key_hex, [0])
