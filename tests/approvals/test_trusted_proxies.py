"""X-Forwarded-For and X-Forwarded-Proto are believed only from TRUSTED_PROXIES (reviewer/proxies.py).

The scope rules, checked on the ASGI wrapper itself; tests/e2e/test_trusted_proxies.py runs a real
Daphne."""

import asyncio

import pytest

from reviewer.proxies import TrustedProxies, forwarded_scope, networks

PROXY = networks(["10.0.0.7/32", "fd00:1::/64"])
FORGED = [
    (b"host", b"reviewer.example"),
    (b"x-forwarded-for", b"203.0.113.9"),
    (b"x-forwarded-proto", b"https"),
    (b"x-forwarded-host", b"evil.example"),
    (b"forwarded", b"for=203.0.113.9;proto=https"),
]


def scope(peer: str, headers=FORGED, kind="http") -> dict:
    return {
        "type": kind,
        "scheme": "http" if kind == "http" else "ws",
        "client": (peer, 50000),
        "headers": headers,
    }


def test_from_a_peer_that_is_no_trusted_proxy_the_forwarding_headers_are_dropped():
    seen = forwarded_scope(scope("198.51.100.20"), PROXY)

    assert seen["client"] == ("198.51.100.20", 50000)
    assert seen["scheme"] == "http"
    assert seen["headers"] == [(b"host", b"reviewer.example")]


def test_from_a_trusted_proxy_the_client_and_scheme_are_the_ones_it_names():
    seen = forwarded_scope(scope("10.0.0.7"), PROXY)

    assert seen["client"] == ("203.0.113.9", 0)
    assert seen["scheme"] == "https"
    assert (b"x-forwarded-proto", b"https") in seen["headers"]
    assert all(
        name not in {b"x-forwarded-for", b"x-forwarded-host", b"forwarded"} for name, _ in seen["headers"]
    )


def test_what_a_client_prepends_to_x_forwarded_for_is_not_believed():
    """The proxy appends the address it saw; anything before it is the client's own text."""
    headers = [(b"x-forwarded-for", b"192.0.2.1, 198.51.100.30"), (b"x-forwarded-proto", b"http, https")]
    seen = forwarded_scope(scope("10.0.0.7", headers), PROXY)

    assert seen["client"] == ("198.51.100.30", 0)
    assert seen["scheme"] == "https"  # the last value, the one the proxy set


def test_a_chain_of_trusted_proxies_is_walked_to_the_first_untrusted_address():
    headers = [(b"x-forwarded-for", b"192.0.2.1, 198.51.100.30, 10.0.0.7")]

    assert forwarded_scope(scope("fd00:1::5", headers), PROXY)["client"] == ("198.51.100.30", 0)


def test_an_unreadable_hop_stops_the_walk_at_the_last_address_a_proxy_wrote():
    headers = [(b"x-forwarded-for", b"not-an-address, 198.51.100.30")]

    assert forwarded_scope(scope("10.0.0.7", headers), PROXY)["client"] == ("198.51.100.30", 0)
    assert forwarded_scope(scope("10.0.0.7", [(b"x-forwarded-for", b"junk")]), PROXY)["client"] == (
        "10.0.0.7",
        0,
    )


def test_a_websocket_through_the_proxy_is_wss_and_one_around_it_stays_ws():
    assert forwarded_scope(scope("10.0.0.7", kind="websocket"), PROXY)["scheme"] == "wss"
    assert forwarded_scope(scope("198.51.100.20", kind="websocket"), PROXY)["scheme"] == "ws"


def test_with_no_trusted_proxies_nobody_is_believed(settings):
    settings.TRUSTED_PROXIES = []
    seen = {}

    async def app(scope, receive, send):
        seen.update(scope)

    asyncio.run(TrustedProxies(app)(scope("127.0.0.1"), None, None))
    assert seen["client"] == ("127.0.0.1", 50000) and seen["scheme"] == "http"
    assert [name for name, _ in seen["headers"]] == [b"host"]


def test_a_trusted_proxies_entry_that_is_not_a_network_is_named():
    with pytest.raises(ValueError, match="'10.0.0.300/8' is not an IP address or network"):
        networks(["10.0.0.7", "10.0.0.300/8"])


def _answer(scope_: dict, settings_redirect: bool, settings) -> tuple[int | None, dict]:
    """Status the wrapper itself sent (None when it passed the request on) and the scope the app saw."""
    settings.SECURE_SSL_REDIRECT = settings_redirect
    seen, sent = {}, []

    async def app(scope, receive, send):
        seen.update(scope)

    async def send(message):
        sent.append(message)

    asyncio.run(TrustedProxies(app, trusted=["10.0.0.7/32"])(scope_, None, send))
    status = next((m["status"] for m in sent if m["type"] == "http.response.start"), None)
    return status, seen


def test_a_proxy_left_out_of_trusted_proxies_gets_a_503_naming_the_setting_not_a_redirect_loop(
    settings, caplog
):
    status, seen = _answer(scope("10.0.0.9"), True, settings)

    assert status == 503 and not seen  # the app never ran, so no redirect to itself
    assert "TRUSTED_PROXIES=10.0.0.9/32" in caplog.text


def test_the_503_is_only_for_an_untrusted_peer_claiming_https_while_http_is_redirected(settings):
    plain = [(b"host", b"reviewer.example")]

    assert _answer(scope("10.0.0.7"), True, settings)[0] is None  # the trusted proxy
    assert _answer(scope("10.0.0.9", plain), True, settings)[0] is None  # no claim: redirected as usual
    assert _answer(scope("10.0.0.9"), False, settings)[0] is None  # no redirect, so no loop
    assert _answer(scope("10.0.0.9", kind="websocket"), True, settings)[0] is None
