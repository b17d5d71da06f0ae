"""The slower per-account sign-in limit (accounts/throttle.py): failures from many addresses, each below
the per-address limit, still reach it; past it the account signs in only with a passkey or a backup
code, which unlocks it, never with the six-digit code; it is recorded once, and it ages out."""

import json
from datetime import timedelta

import pytest
import time_machine
from django.conf import settings
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken

from audit.models import AuditEvent, Verb
from tests.accounts.test_sign_in_throttling import page_without_token, sign_in, signed_in
from tests.factories import PASSWORD, totp_code, trail_name
from tests.soft_authenticator import register_passkey

pytestmark = pytest.mark.django_db

PER_ADDRESS = settings.AXES_FAILURE_LIMIT
ACCOUNT_LIMIT = settings.SIGN_IN_ACCOUNT_FAILURE_LIMIT


def distributed_guess(username: str, failures: int) -> None:
    """`failures` wrong passwords from as many addresses as it takes to stay below each one's limit."""
    for attempt in range(failures):
        address = f"203.0.{attempt // (PER_ADDRESS - 1)}.{attempt % (PER_ADDRESS - 1) + 1}"
        assert not signed_in(sign_in(username, "wrong", address=address))


def backup_code(user) -> str:
    device = StaticDevice.objects.create(user=user, name="backup codes", confirmed=True)
    return StaticToken.objects.create(device=device, token="k7q2m4x9").token


def test_a_distributed_guess_below_every_address_limit_reaches_the_account_limit(reviewer_a):
    distributed_guess("reviewer_a", ACCOUNT_LIMIT)

    assert not signed_in(sign_in("reviewer_a", PASSWORD, totp_code(reviewer_a), address="192.0.2.30"))


def test_below_the_account_limit_the_person_signs_in_as_usual(reviewer_a):
    distributed_guess("reviewer_a", ACCOUNT_LIMIT - 1)

    assert signed_in(sign_in("reviewer_a", PASSWORD, totp_code(reviewer_a), address="192.0.2.31"))


def test_past_the_account_limit_the_six_digit_code_gets_the_answer_every_refusal_gets(reviewer_a):
    code = totp_code(reviewer_a)
    wrong_password = sign_in("reviewer_a", "wrong", code, address="192.0.2.40")
    distributed_guess("reviewer_a", ACCOUNT_LIMIT)
    right_code = sign_in("reviewer_a", PASSWORD, code, address="192.0.2.32")

    assert right_code.status_code == wrong_password.status_code == 400
    assert page_without_token(right_code) == page_without_token(wrong_password)


def test_a_locked_account_is_unlocked_by_signing_in_with_a_backup_code(reviewer_a):
    code = backup_code(reviewer_a)
    distributed_guess("reviewer_a", ACCOUNT_LIMIT)

    assert signed_in(sign_in("reviewer_a", PASSWORD, code, address="192.0.2.33"))

    (event,) = AuditEvent.objects.filter(verb=Verb.SIGN_IN_UNLOCKED)
    assert event.subject == trail_name("reviewer_a") and event.data == {"factor": "backup code"}
    # Unlocked: the count starts again, and the six-digit code signs in once more.
    assert signed_in(sign_in("reviewer_a", PASSWORD, totp_code(reviewer_a), address="192.0.2.34"))


def test_a_locked_account_is_unlocked_by_signing_in_with_a_passkey(reviewer_a):
    authenticator = register_passkey(reviewer_a)
    distributed_guess("reviewer_a", ACCOUNT_LIMIT)
    client = Client(REMOTE_ADDR="192.0.2.35")
    options = client.post(reverse("accounts:passkey_sign_in_options")).json()

    answer = json.dumps(authenticator.get(options))
    response = client.post(
        reverse("login"), {"username": "reviewer_a", "password": PASSWORD, "passkey": answer}
    )

    assert signed_in(response)
    assert AuditEvent.objects.get(verb=Verb.SIGN_IN_UNLOCKED).data == {"factor": "passkey"}


def test_a_backup_code_with_a_wrong_password_does_not_unlock(reviewer_a):
    code = backup_code(reviewer_a)
    distributed_guess("reviewer_a", ACCOUNT_LIMIT)

    assert not signed_in(sign_in("reviewer_a", "wrong", code, address="192.0.2.36"))
    assert StaticToken.objects.filter(token=code).exists()  # not spent on a refused attempt
    assert not AuditEvent.objects.filter(verb=Verb.SIGN_IN_UNLOCKED).exists()


def test_the_account_limit_is_recorded_once_not_once_per_attempt(reviewer_a):
    distributed_guess("reviewer_a", ACCOUNT_LIMIT + 10)

    (event,) = AuditEvent.objects.filter(verb=Verb.SIGN_IN_THROTTLED, data__limit="account")
    assert event.subject == trail_name("reviewer_a") and event.actor == "system"
    assert event.data == {
        "limit": "account",
        "failure_limit": ACCOUNT_LIMIT,
        "window_seconds": settings.SIGN_IN_ACCOUNT_WINDOW_SECONDS,
    }


def test_the_account_limit_ages_out_after_its_window(reviewer_a):
    distributed_guess("reviewer_a", ACCOUNT_LIMIT)

    later = timezone.now() + timedelta(seconds=settings.SIGN_IN_ACCOUNT_WINDOW_SECONDS + 1)
    with time_machine.travel(later, tick=False):
        assert signed_in(sign_in("reviewer_a", PASSWORD, totp_code(reviewer_a), address="192.0.2.37"))


def test_an_account_limit_below_the_address_limit_is_refused_at_start_up(monkeypatch):
    """Else one address's failures would lock the account everywhere again."""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", "import reviewer.settings"],
        env={**__import__("os").environ, "SIGN_IN_FAILURE_LIMIT": "5", "SIGN_IN_ACCOUNT_FAILURE_LIMIT": "5"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "SIGN_IN_ACCOUNT_FAILURE_LIMIT must be above SIGN_IN_FAILURE_LIMIT" in result.stderr
