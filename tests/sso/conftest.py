"""The loopback OpenID Connect provider (tests/sso/oidc_idp: django-oauth-toolkit's OIDC mode, standing
in for Okta, Entra ID, Google or Keycloak, which cannot be reached from here), one per test module, and
the tenant's configuration that points at it."""

import base64
import hashlib
import secrets

import httpx
import pytest

from sso.models import IdentityProvider
from tests.sso.oidc_idp.harness import OidcProvider

CLIENT_ID = "reviewer"
CLIENT_SECRET = "reviewer-client-secret-of-at-least-32-bytes"
CALLBACK = "http://testserver/accounts/sso/callback"


@pytest.fixture(scope="module")
def oidc_idp():
    idp = OidcProvider().start(timeout=120)  # a timeout, not a wait: a loaded machine starts it slowly
    idp.add_client(CLIENT_ID, CLIENT_SECRET, [CALLBACK])
    yield idp
    idp.stop()


@pytest.fixture
def identity_provider(tenant, oidc_idp, monkeypatch):
    monkeypatch.setenv("TEST_IDP_CLIENT_SECRET", CLIENT_SECRET)
    return IdentityProvider.objects.create(
        tenant=tenant,
        display_name="Acme IdP",
        issuer=oidc_idp.issuer,
        client_id=CLIENT_ID,
        client_secret_env="TEST_IDP_CLIENT_SECRET",
        allowed_email_domains="acme.example",
        create_users=True,
    )


def sign_in_through_provider(client, idp, username, *, tenant_slug="acme"):
    """The browser's round trip: Reviewer's start URL, the provider's sign-in form, Reviewer's callback.
    Returns the callback's response."""
    start = client.get(f"/accounts/sso/{tenant_slug}/")
    assert start.status_code == 302, start.content[:500]
    back = idp.sign_in(start["Location"], username)
    assert back.startswith(CALLBACK), back
    return client.get(back.removeprefix("http://testserver"))


def provider_id_token(idp, username, *, client_id=CLIENT_ID, client_secret=CLIENT_SECRET, nonce="n-0"):
    """A real ID token from the provider for `client_id` (code flow with PKCE, as a relying party)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    query = httpx.QueryParams(
        response_type="code",
        client_id=client_id,
        redirect_uri=CALLBACK,
        scope="openid email",
        state="s",
        nonce=nonce,
        code_challenge=challenge,
        code_challenge_method="S256",
    )
    back = httpx.URL(idp.sign_in(f"{idp.issuer}/authorize/?{query}", username))
    answer = httpx.post(
        f"{idp.issuer}/token/",
        data={
            "grant_type": "authorization_code",
            "code": back.params["code"],
            "redirect_uri": CALLBACK,
            "client_id": client_id,
            "client_secret": client_secret,
            "code_verifier": verifier,
        },
    )
    answer.raise_for_status()
    return answer.json()["id_token"]
