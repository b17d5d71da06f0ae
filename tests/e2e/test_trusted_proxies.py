"""X-Forwarded-For and X-Forwarded-Proto through a real Daphne on loopback: reached once from 127.0.0.1
(a client that found Daphne's port) and once from 127.0.0.2 (the configured proxy), each sending the same
forged headers. Only the proxy's are believed, for the scheme and for the address sign-in throttling
counts under."""

import os
import re
import socket
import sys

import httpx
import pytest
from axes.models import AccessAttempt
from django.conf import settings as django_settings

from tests.e2e.conftest import database_url
from tests.examples.harness import CHECKOUT_PYTHONPATH
from tests.reviewer_processes import ServerProcess, answers

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _sign_in_once(url: str, source: str) -> httpx.Response:
    """GET the sign-in page and post a wrong password, from the local address `source`, with forged
    forwarding headers on both requests."""
    forged = {"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https"}
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(base_url=url, transport=transport, headers=forged, timeout=10) as client:
        page = client.get("/accounts/login/")
        token_match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert token_match is not None
        token = token_match.group(1)
        scheme = "https" if "strict-transport-security" in page.headers else "http"
        origin = f"{scheme}://{url.split('://', 1)[1]}"
        posted = client.post(
            "/accounts/login/",
            data={"csrfmiddlewaretoken": token, "username": "nobody", "password": "wrong", "otp_token": ""},
            headers={"Origin": origin, "Referer": origin + "/accounts/login/"},
        )
    assert posted.status_code == 400, posted.text[:500]
    return page


def test_daphne_believes_the_forwarding_headers_only_from_the_trusted_proxy(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    env = {
        **os.environ,
        "PYTHONPATH": CHECKOUT_PYTHONPATH,
        "DEBUG": "true",
        "DATABASE_URL": database_url(),
        "REVIEWER_DATA_DIR": str(tmp_path / "data"),
        "REVIEWER_SIGNING_KEY_DIR": str(django_settings.SIGNING_KEY_DIR),
        "TRUSTED_PROXIES": "127.0.0.2/32",
        "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO",
        "SECURE_HSTS_SECONDS": "3600",  # sent only on a request Django takes for https
    }
    (tmp_path / "logs").mkdir()
    daphne = ServerProcess(
        "reviewer",
        [sys.executable, "-m", "daphne", "--fd", str(listener.fileno()), "reviewer.asgi:application"],
        env=env,
        log_dir=tmp_path / "logs",
        pass_fds=(listener.fileno(),),
    ).start()
    try:
        daphne.wait_until(
            lambda: answers(f"{url}/.well-known/jwks.json"), "an answer to /.well-known/jwks.json"
        )

        around = _sign_in_once(url, "127.0.0.1")
        assert "strict-transport-security" not in around.headers  # X-Forwarded-Proto ignored
        assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"127.0.0.1"}

        through = _sign_in_once(url, "127.0.0.2")
        assert "strict-transport-security" in through.headers  # the proxy said https
        assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"127.0.0.1", "203.0.113.9"}
    finally:
        daphne.stop()
        listener.close()
