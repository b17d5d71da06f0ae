"""mozilla-django-oidc's views for a tenant's provider: the start of a sign-in (state, nonce and PKCE
kept in the session by the library, the state remembered with its tenant here) and the provider's
callback (the library checks the state, usable once, and hands the code to ProviderBackend). The pages
that use them are sso/views.py's."""

from urllib.parse import parse_qs, urlparse

from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from sso.errors import SignInRefused
from sso.models import IdentityProvider
from sso.oidc.backend import SESSION_PROVIDERS
from sso.oidc.provider import FIXED_SETTINGS, discovery, setting


class ProviderSignInStart(OIDCAuthenticationRequestView):
    """Off to the tenant's provider with a fresh state, nonce and PKCE challenge; the state is remembered
    with the tenant it belongs to. Built by `redirect_to_provider`, which gives the attributes below."""

    provider: IdentityProvider = None  # type: ignore[assignment]  # as_view's initkwargs name class attributes
    document: dict = {}  # the provider's discovery document
    extra_params: dict = {}  # e.g. a step-up's prompt=login, max_age=0 and bound nonce
    remembered: dict = {}  # what the callback needs besides the tenant (a step-up's)

    def get_settings(self, name, *default):
        if name == "OIDC_USE_NONCE" and "nonce" in self.extra_params:
            # The caller's nonce (a step-up's, bound to its proposal): the library sends and keeps that one.
            return False
        return setting(self.provider, self.document, name, *default)

    def get_extra_params(self, request):
        return self.extra_params

    def get(self, request):
        response = super().get(request)
        state = parse_qs(urlparse(response["Location"]).query)["state"][0]
        providers = request.session.get(SESSION_PROVIDERS) or {}
        providers = {key: value for key, value in providers.items() if key in request.session["oidc_states"]}
        providers[state] = {"tenant": self.provider.tenant.slug, **self.remembered}
        request.session[SESSION_PROVIDERS] = providers
        return response


def redirect_to_provider(
    request, provider: IdentityProvider, *, extra_params: dict | None = None, remembered: dict | None = None
) -> HttpResponse:
    """The redirect that starts a sign-in (or a step-up) at the tenant's provider; SignInRefused when its
    discovery document cannot be had or names another issuer."""
    view = ProviderSignInStart.as_view(
        provider=provider,
        document=discovery(provider),
        extra_params=extra_params or {},
        remembered=remembered or {},
    )
    return view(request)


class ProviderCallback(OIDCAuthenticationCallbackView):
    """GET /accounts/sso/callback: the library checks the state and hands the code to ProviderBackend;
    a sign-in it accepts is a verified session (the provider's device), one it refuses a page saying why.
    `on_refused(request, refusal)` and `on_signed_in(request, user)` are the page's (sso/views.py)."""

    # Given by as_view (sso/views.py); the instance's attributes then stand in for these.
    def on_refused(self, request: HttpRequest, refusal: SignInRefused) -> HttpResponse:
        raise NotImplementedError

    def on_signed_in(self, request: HttpRequest, user) -> HttpResponse | None:
        raise NotImplementedError

    def get_settings(self, name, *default):
        if name == "LOGIN_REDIRECT_URL":
            return reverse("approvals:queue")
        return FIXED_SETTINGS.get(name, default[0] if default else None)

    def get(self, request):
        try:
            return super().get(request)
        except (SignInRefused, SuspiciousOperation) as error:
            return self.on_refused(request, refusal_of(error))

    def login_success(self):
        response = super().login_success()
        return self.on_signed_in(self.request, self.user) or response

    def login_failure(self):
        error = str(self.request.GET.get("error") or "")[:100]
        if error:
            message = f"the identity provider did not sign you in ({error})"
            return self.on_refused(self.request, SignInRefused("provider_error", message))
        # A code without a state of this session's (replayed, or started in another browser), or an
        # account that became inactive: the library answers both with a failure.
        return self.on_refused(self.request, refusal_of(None))


def refusal_of(error: Exception | None) -> SignInRefused:
    if isinstance(error, SignInRefused):
        return error
    return SignInRefused("unknown_state", "this sign-in was not started here or was used already")
