"""Signing in the person the tenant's provider vouches for, with mozilla-django-oidc.

Django instantiates an authentication backend from settings, before any request says which tenant's
provider answers. So `ProviderBackend` (the one AUTHENTICATION_BACKENDS names) finds the tenant from the
callback's state, then builds the library's backend for that provider, `TenantRelyingParty`, through
its own `__init__`: its settings are answered by `get_settings` from the tenant's IdentityProvider and
discovery document (sso/oidc/provider.py), never from Django's settings. The library exchanges the code
at the token endpoint (with the PKCE verifier) and hands the ID token to `verify_token`, which is
sso/oidc/id_token.py's check; the claims then go to sso.sign_in.services.sign_in, or to the step-up.
"""

import requests
from django.contrib.auth.backends import ModelBackend
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from sso.errors import SignInRefused
from sso.models import IdentityProvider
from sso.oidc import idp_step_up
from sso.oidc.id_token import verified_claims
from sso.oidc.provider import discovery, setting

SESSION_PROVIDERS = "sso_states"  # state -> tenant slug, beside the library's own "oidc_states"


class TenantRelyingParty(OIDCAuthenticationBackend):
    """The library's backend for one tenant's provider, for one callback. `pending` is what the start of
    the sign-in remembered with its state (the tenant; a step-up's proposal, digest and person)."""

    def __init__(self, provider: IdentityProvider, document: dict, pending: dict):
        self.provider = provider
        self.document = document
        self.pending = pending
        super().__init__()

    def get_settings(self, name, *default):
        return setting(self.provider, self.document, name, *default)

    def verify_token(self, token, **kwargs):
        return verified_claims(self, token, nonce=kwargs.get("nonce"))

    def get_or_create_user(self, access_token, id_token, payload):
        """The ID token's claims are signed and checked: the person is matched on them, not on the
        userinfo answer (unsigned, and its `sub` would have to be compared again)."""
        from sso.sign_in.services import sign_in  # the services import approvals; this module loads early

        if self.pending.get("purpose") == "step_up":
            idp_step_up.complete(self.request, self.provider, payload, self.pending)
            user = self.UserModel.objects.get(pk=self.pending["user"])
            user.sso_step_up = True  # type: ignore[attr-defined]  # for the callback view, not a field
            return user
        user, device = sign_in(self.provider, payload)
        user.sso_device = device
        user.sso_claims = payload
        return user


class ProviderBackend(ModelBackend):
    """Signs in the person the provider vouches for, at the tenant the callback's state was issued for
    (sso_states in the session). A deactivated person is not signed in and their session ends (Django's
    get_user asks ModelBackend's active check)."""

    # Django calls it with the callback's keywords (the library's nonce and code_verifier), never with a
    # username and password in their places: ModelBackend's signature is not this one's.
    def authenticate(self, request, nonce=None, code_verifier=None, **kwargs):  # type: ignore[override]
        if request is None or kwargs or "code" not in request.GET:
            return None  # a password sign-in, or not the provider's callback
        state = request.GET.get("state", "")
        pending = (request.session.get(SESSION_PROVIDERS) or {}).pop(state, None)
        request.session.modified = True
        if pending is None:
            raise SignInRefused("unknown_state", "this sign-in was not started here or was used already")
        provider = (
            IdentityProvider.objects.select_related("tenant")
            .filter(tenant__slug=pending["tenant"], enabled=True)
            .first()
        )
        if provider is None:
            raise SignInRefused("no_provider", "this tenant no longer signs in through a provider")
        relying_party = TenantRelyingParty(provider, discovery(provider), pending)
        if not relying_party.OIDC_RP_CLIENT_SECRET:
            raise SignInRefused("no_client_secret", "the provider's client secret is not configured")
        try:
            return relying_party.authenticate(request, nonce=nonce, code_verifier=code_verifier)
        except requests.HTTPError as error:
            status = error.response.status_code if error.response is not None else "no answer"
            raise SignInRefused("token_refused", f"the provider refused the code ({status})") from None
