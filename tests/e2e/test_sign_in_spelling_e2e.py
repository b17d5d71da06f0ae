"""The spelled sign-in against real processes: a browser-shaped client (the page, its CSRF cookie and
token, then the POST) over HTTP to Reviewer under Daphne on the test database. Four spellings of one
name, each a wrong password, are one count under one name (axes' failure log, which the account limit
reads), and a fullwidth spelling with the right password and code signs the person in."""

import re

import httpx
import pytest
from axes.models import AccessFailureLog

from tests.factories import PASSWORD, totp_code

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def sign_in(url: str, username: str, password: str, code: str) -> httpx.Response:
    with httpx.Client(base_url=url, timeout=30) as client:
        page = client.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert token is not None, page.text[:300]
        return client.post(
            "/accounts/login/",
            data={
                "csrfmiddlewaretoken": token.group(1),
                "username": username,
                "password": password,
                "otp_token": code,
            },
            headers={"Origin": url, "Referer": f"{url}/accounts/login/"},
        )


def test_spellings_of_a_name_are_one_count_over_http(reviewer_stack, reviewer_a):
    for spelling in (" reviewer_a", "reviewer_a ", "Reviewer_A", "ｒｅｖｉｅｗｅｒ＿ａ"):
        assert sign_in(reviewer_stack.url, spelling, "wrong", "000000").status_code == 400

    assert list(AccessFailureLog.objects.values_list("username", flat=True).distinct()) == ["reviewer_a"]
    signed_in = sign_in(reviewer_stack.url, "ｒｅｖｉｅｗｅｒ＿ａ", PASSWORD, totp_code(reviewer_a))
    assert signed_in.status_code == 302, signed_in.text[:500]
