"""The tenant's provider in mozilla-django-oidc's terms: its discovery document, and the library's
settings answered from the tenant's IdentityProvider and that document instead of from Django's settings
(the library names one provider for the whole site; here each tenant has its own)."""

import requests

from sso.errors import SignInRefused
from sso.models import IdentityProvider

TIMEOUT_SECONDS = 10

# The library's settings answered for every provider alike; the per-provider ones come from `setting`.
FIXED_SETTINGS = {
    "OIDC_AUTHENTICATION_CALLBACK_URL": "sso:callback",
    "OIDC_USE_NONCE": True,
    "OIDC_USE_PKCE": True,
    "OIDC_PKCE_CODE_CHALLENGE_METHOD": "S256",
    "OIDC_VERIFY_SSL": True,
    "OIDC_TIMEOUT": TIMEOUT_SECONDS,
    "OIDC_STORE_ACCESS_TOKEN": False,
    "OIDC_STORE_ID_TOKEN": False,
    "OIDC_ALLOW_UNSECURED_JWT": False,
    "OIDC_TOKEN_USE_BASIC_AUTH": False,
    "OIDC_CREATE_USER": False,  # sso.sign_in.services decides, by the tenant's setting
    "OIDC_REDIRECT_FIELD_NAME": "next",
}


def discovery(provider: IdentityProvider) -> dict:
    """The provider's discovery document, whose `issuer` must be the configured one (OpenID Connect
    Discovery 1.0, section 4.3): a document for another issuer is refused."""
    url = provider.issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        answer = requests.get(url, timeout=TIMEOUT_SECONDS)
        answer.raise_for_status()
        document = answer.json()
    except (requests.RequestException, ValueError) as error:
        raise SignInRefused(
            "provider_unreachable", f"the identity provider did not answer ({error})"
        ) from None
    if document.get("issuer") != provider.issuer:
        raise SignInRefused("wrong_issuer", "the provider's discovery document names another issuer")
    return document


def setting(provider: IdentityProvider, document: dict, name: str, *default):
    """The library's setting `name` for this provider: what its `get_settings(name, *default)` answers."""
    if name == "OIDC_RP_CLIENT_ID":
        return provider.client_id
    if name == "OIDC_RP_CLIENT_SECRET":
        return provider.client_secret()
    if name == "OIDC_RP_SCOPES":
        return provider.scopes
    if name == "OIDC_OP_AUTHORIZATION_ENDPOINT":
        return document["authorization_endpoint"]
    if name == "OIDC_OP_TOKEN_ENDPOINT":
        return document["token_endpoint"]
    if name == "OIDC_OP_USER_ENDPOINT":
        return document.get("userinfo_endpoint")
    if name == "OIDC_OP_JWKS_ENDPOINT":
        return document["jwks_uri"]
    if name == "OIDC_RP_SIGN_ALGO":
        return "RS256"  # the token's own asymmetric algorithm is checked in sso/oidc/id_token.py
    if name == "OIDC_RP_IDP_SIGN_KEY":
        return None  # keys come from the provider's JWKS
    return FIXED_SETTINGS.get(name, default[0] if default else None)
