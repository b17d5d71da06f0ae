"""SAML 2.0 sign-in in real Chromium against Daphne, through the pysaml2 identity provider of
tests/sso/saml_idp on its own loopback server under another host name ("localhost", Reviewer being
127.0.0.1): the provider's answer reaches the assertion consumer as a cross-site POST, which carries
no CSRF token and not the Lax session cookie, as from Okta or Entra ID. The test client skips both.

Daphne runs with Secure cookies, as in production (DEBUG off): the consumer finds the request this
browser started in djangosaml2's own SameSite=None session cookie, which browsers keep only when
Secure (Chromium accepts Secure cookies from a loopback address over HTTP)."""

import pytest
from playwright.sync_api import expect

from audit.models import AuditEvent, Verb
from sso.models import ExternalIdentity, SamlAssertionSeen
from tests.browser.conftest import daphne_server
from tests.sso.saml_idp.idp import SamlIdentityProvider
from tests.sso.test_saml import saml_provider  # noqa: F401 (a fixture: the provider on this module's saml_idp)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def live_server_url(django_db_setup, django_db_blocker, tmp_path_factory):
    with daphne_server(tmp_path_factory, SESSION_COOKIE_SECURE="true", CSRF_COOKIE_SECURE="true") as url:
        yield url


@pytest.fixture(scope="module")
def saml_idp():
    idp = SamlIdentityProvider(host="localhost").start()
    idp.add_person("uma", "okta-00u-uma", email="uma@acme.example", groups=["Payments approvers"])
    idp.signed_in = "uma"
    yield idp
    idp.stop()


def test_the_providers_cross_site_post_signs_the_person_in(
    new_page,
    live_server_url,
    saml_idp,
    saml_provider,  # noqa: F811 (the imported fixture, requested by name)
):
    page = new_page()
    posts = []
    page.on(
        "response",
        lambda response: (
            posts.append((response.url, response.status)) if response.request.method == "POST" else None
        ),
    )

    page.goto("/accounts/sso/acme/")

    expect(page.get_by_role("heading", name="To decide", level=1)).to_be_visible()
    assert posts == [(f"{live_server_url}/accounts/sso/saml/acme/acs/", 302)]
    assert page.url.startswith(live_server_url)
    identity = ExternalIdentity.objects.get(issuer=saml_idp.entity_id)
    assert identity.subject == "okta-00u-uma"
    assert AuditEvent.objects.filter(verb=Verb.SSO_SIGNED_IN).count() == 1
    assert SamlAssertionSeen.objects.count() == 1
    cookies = {cookie["name"]: cookie for cookie in page.context.cookies()}
    assert cookies["sessionid"]["sameSite"] == "Lax" and cookies["sessionid"]["secure"]
    assert cookies["saml_session"]["sameSite"] == "None" and cookies["saml_session"]["secure"]
