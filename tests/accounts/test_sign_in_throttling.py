"""Sign-in throttling, through real HTTP requests to the login view: django-axes counts failures per
pair (account, client address) and per client address, a throttled attempt gets the very answer a wrong
password gets, the victim is back after a short cool-down, guessing codes does not lock the person's
device, and the audit trail gets one event per lockout, not one per attempt. The slower per-account
limit and unlocking with a factor are in test_account_limit.py."""

import re
from datetime import timedelta

import pytest
import time_machine
from django.conf import settings
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEvent, Verb
from tests.factories import PASSWORD, totp_code, trail_name

pytestmark = pytest.mark.django_db

LIMIT = settings.AXES_FAILURE_LIMIT


def sign_in(username, password, code="", address="198.51.100.7"):
    return Client().post(
        reverse("login"),
        {"username": username, "password": password, "otp_token": code},
        REMOTE_ADDR=address,
    )


def signed_in(response) -> bool:
    return response.status_code == 302


def page_without_token(response) -> str:
    """The answer as a guesser compares it: the CSRF token (in the form and the htmx headers) differs on
    every response."""
    html = re.sub(r'name="csrfmiddlewaretoken" value="[^"]+"', "", response.content.decode())
    return re.sub(r'"X-CSRFToken": "[^"]+"', "", html)


def test_wrong_passwords_from_one_address_do_not_lock_the_person_out_at_another(reviewer_a):
    """The denial of service: a guesser who knows a reviewer's name fails at address A, again and again."""
    for _ in range(LIMIT * 4):
        assert not signed_in(sign_in("reviewer_a", "wrong", address="203.0.113.20"))

    assert signed_in(sign_in("reviewer_a", PASSWORD, totp_code(reviewer_a), address="192.0.2.20"))


def test_the_pair_of_account_and_address_is_throttled_after_the_limit(reviewer_a):
    for _ in range(LIMIT):
        sign_in("reviewer_a", "wrong", address="203.0.113.21")

    # The right password and code, from that address, is refused during the cool-down.
    assert not signed_in(sign_in("reviewer_a", PASSWORD, totp_code(reviewer_a), address="203.0.113.21"))


def test_refused_attempts_during_the_cool_down_do_not_extend_it(reviewer_a):
    for _ in range(LIMIT):
        sign_in("reviewer_a", "wrong", address="203.0.113.22")
    halfway = timezone.now() + timedelta(seconds=settings.SIGN_IN_COOL_OFF_SECONDS // 2)
    with time_machine.travel(halfway, tick=False):
        for _ in range(LIMIT):
            sign_in("reviewer_a", "wrong", address="203.0.113.22")

    later = timezone.now() + timedelta(seconds=settings.SIGN_IN_COOL_OFF_SECONDS + 1)
    with time_machine.travel(later, tick=False):
        assert signed_in(sign_in("reviewer_a", PASSWORD, totp_code(reviewer_a), address="203.0.113.22"))


def test_an_address_is_throttled_after_the_limit_whatever_names_it_tries(tenant, reviewer_a):
    for attempt in range(LIMIT):
        sign_in(f"guess-{attempt}", "wrong", address="203.0.113.50")

    assert not signed_in(sign_in("reviewer_a", PASSWORD, totp_code(reviewer_a), address="203.0.113.50"))
    assert signed_in(sign_in("reviewer_a", PASSWORD, totp_code(reviewer_a), address="192.0.2.10"))


def test_a_right_password_a_wrong_password_and_a_throttled_attempt_get_the_same_answer(reviewer_a):
    wrong_password = sign_in("reviewer_a", "wrong", "123456")
    right_password_wrong_code = sign_in("reviewer_a", PASSWORD, "123456")
    for _ in range(LIMIT):
        sign_in("reviewer_a", "wrong", "123456")
    throttled_right_password = sign_in("reviewer_a", PASSWORD, "123456")
    throttled_wrong_password = sign_in("reviewer_a", "wrong", "123456")

    answers = [wrong_password, right_password_wrong_code, throttled_right_password, throttled_wrong_password]
    assert {response.status_code for response in answers} == {400}
    assert len({page_without_token(response) for response in answers}) == 1


def test_the_victim_signs_in_again_after_the_short_cool_down(reviewer_a):
    for _ in range(LIMIT + 3):
        sign_in("reviewer_a", "wrong", address="203.0.113.9")

    later = timezone.now() + timedelta(seconds=settings.SIGN_IN_COOL_OFF_SECONDS + 1)
    with time_machine.travel(later, tick=False):
        assert signed_in(sign_in("reviewer_a", PASSWORD, totp_code(reviewer_a), address="192.0.2.1"))


def test_guessing_codes_with_a_stolen_password_does_not_lock_the_persons_device(reviewer_a):
    for _ in range(LIMIT - 1):
        assert not signed_in(sign_in("reviewer_a", PASSWORD, "000000", address="203.0.113.66"))

    # django-otp's own back-off would make the device refuse even the right code for seconds to minutes.
    assert signed_in(sign_in("reviewer_a", PASSWORD, totp_code(reviewer_a), address="192.0.2.2"))


def test_wrong_codes_count_towards_the_limit_like_wrong_passwords(reviewer_a):
    for _ in range(LIMIT):
        sign_in("reviewer_a", PASSWORD, "000000", address="203.0.113.67")

    assert not signed_in(sign_in("reviewer_a", PASSWORD, totp_code(reviewer_a), address="203.0.113.67"))


def test_throttling_is_recorded_once_per_lockout_not_once_per_attempt(reviewer_a):
    for _ in range(LIMIT + 20):
        sign_in("reviewer_a", "wrong", address="203.0.113.70")

    (event,) = AuditEvent.objects.filter(verb=Verb.SIGN_IN_THROTTLED)
    assert event.subject == trail_name("reviewer_a") and event.actor == "system"
    assert event.chain == f"tenant:{reviewer_a.tenant_memberships.get().tenant_id}"
    assert event.data == {
        "address": "203.0.113.70",
        "failure_limit": LIMIT,
        "cool_off_seconds": settings.SIGN_IN_COOL_OFF_SECONDS,
    }
    assert "wrong" not in str(event.data)


def test_an_unknown_name_is_throttled_and_recorded_in_the_system_chain(db):
    for _ in range(LIMIT + 2):
        sign_in("nobody-here", "wrong", address="203.0.113.80")

    (event,) = AuditEvent.objects.filter(verb=Verb.SIGN_IN_THROTTLED)
    assert event.chain == "system" and event.subject == "sign_in:nobody-here"


def test_a_success_clears_the_count(reviewer_a):
    for _ in range(LIMIT - 1):
        sign_in("reviewer_a", "wrong", address="192.0.2.4")
    assert signed_in(sign_in("reviewer_a", PASSWORD, totp_code(reviewer_a), address="192.0.2.4"))
    for _ in range(LIMIT - 1):
        sign_in("reviewer_a", "wrong", address="192.0.2.4")
    assert signed_in(sign_in("reviewer_a", PASSWORD, totp_code(reviewer_a), address="192.0.2.4"))


def test_the_admin_has_no_second_sign_in_form_that_answers_differently(reviewer_a):
    """django-otp's admin form says "Invalid token" to a right password with a wrong code; the admin's
    login URL sends everyone to the one throttled form instead, for GET and POST alike."""
    for response in (
        Client().get("/admin/login/", {"next": "/admin/approvals/proposal/"}),
        Client().post("/admin/login/", {"username": "reviewer_a", "password": PASSWORD, "otp_token": "1"}),
    ):
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login") + "?next=/admin/")
    assert Client().get("/admin/login/", {"next": "https://evil.example/"})["Location"] == (
        reverse("login") + "?next=/admin/"
    )
