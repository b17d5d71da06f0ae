"""lib/url_credentials.py: what the audit trail keeps of a URL an admin registered."""

import pytest

from lib.url_credentials import without_credentials


@pytest.mark.parametrize(
    "url, kept",
    [
        ("https://hooks.example.test/in", "https://hooks.example.test/in"),
        ("https://user:pw@hooks.example.test/in", "https://REDACTED@hooks.example.test/in"),
        ("https://user@hooks.example.test:8443/in", "https://REDACTED@hooks.example.test:8443/in"),
        (
            "https://hooks.example.test/in?token=t&tenant=",
            "https://hooks.example.test/in?token=REDACTED&tenant=REDACTED",
        ),
        ("https://hooks.example.test/in?bare-token", "https://hooks.example.test/in?REDACTED"),
        ("https://hooks.example.test/in#signature", "https://hooks.example.test/in#REDACTED"),
        ("http://u:p@[::1]:9000/x", "http://REDACTED@[::1]:9000/x"),
        ("urn:agent:refunds", "urn:agent:refunds"),
        ("https://hooks.example.test:99999/in?token=t", "REDACTED"),  # does not parse: nothing of it
        ("", ""),
    ],
)
def test_a_url_keeps_its_shape_without_its_credentials(url, kept):
    assert without_credentials(url) == kept
