"""OpenID Connect sign-in with mozilla-django-oidc, configured per tenant instead of by settings.

The library does the authorization code flow: a random `state`, a `nonce` and a PKCE verifier kept in the
session under the state (usable once: the callback deletes it before anything else), the code exchanged
at the token endpoint, the token's signature checked against the provider's JWKS. Its settings name one
provider for the whole site; here `get_settings` answers from the tenant's IdentityProvider and its
discovery document instead. Its ID-token check leaves the audience unchecked and the issuer to the
caller, so `verify_token` here checks signature, algorithm, issuer, audience (and `azp`), expiry, issue
time and nonce itself with PyJWT, and refuses with a SignInRefused naming what was wrong.
"""

import hmac
import logging
from urllib.parse import parse_qs, urlparse

import jwt
import requests
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from sso import idp_step_up
from sso.errors import SignInRefused
from sso.models import IdentityProvider

LOGGER = logging.getLogger(__name__)
SESSION_PROVIDERS = "sso_states"  # state -> tenant slug, beside the library's own "oidc_states"
ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "PS256"]  # never "none", never HS* (shared secret)
TIMEOUT_SECONDS = 10
CLOCK_SKEW_SECONDS = 60

# The library's settings answered for every provider alike; the per-provider ones come from `_settings`.
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
    "OIDC_CREATE_USER": False,  # sso.services decides, by the tenant's setting
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


def _settings(provider: IdentityProvider, document: dict, name: str, default):
    per_provider = {
        "OIDC_RP_CLIENT_ID": provider.client_id,
        "OIDC_RP_SCOPES": provider.scopes,
        "OIDC_OP_AUTHORIZATION_ENDPOINT": document.get("authorization_endpoint"),
    }
    if name in per_provider:
        return per_provider[name]
    return FIXED_SETTINGS.get(name, default)


class ProviderSignInStart(OIDCAuthenticationRequestView):
    """GET /accounts/sso/<tenant>/: off to the tenant's provider with a fresh state, nonce and PKCE
    challenge; the state is remembered with the tenant it belongs to."""

    def __init__(self, *args, **kwargs):
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)  # no site-wide settings to read

    def get(self, request, provider: IdentityProvider, extra_params: dict | None = None):
        self.provider, self.extra = provider, extra_params or {}
        self.document = discovery(provider)
        self.OIDC_OP_AUTH_ENDPOINT = self.document["authorization_endpoint"]
        self.OIDC_RP_CLIENT_ID = provider.client_id
        response = super().get(request)
        state = parse_qs(urlparse(response["Location"]).query)["state"][0]
        providers = request.session.get(SESSION_PROVIDERS) or {}
        providers = {key: value for key, value in providers.items() if key in request.session["oidc_states"]}
        providers[state] = {"tenant": provider.tenant.slug, **self.remembered}
        request.session[SESSION_PROVIDERS] = providers
        if self.remembered.get("purpose") == "step_up":
            idp_step_up.rebind_nonce(
                request, response, state, self.remembered["proposal"], self.remembered["digest"]
            )
        return response

    remembered: dict = {}  # what the callback needs besides the tenant (a step-up's proposal and digest)

    def get_settings(self, name, *default):
        return _settings(self.provider, self.document, name, default[0] if default else None)

    def get_extra_params(self, request):
        return self.extra


class ProviderCallback(OIDCAuthenticationCallbackView):
    """GET /accounts/sso/callback: the library checks the state and hands the code to ProviderBackend;
    a sign-in it accepts is a verified session (the provider's device), one it refuses a page saying why.
    `on_refused(request, refusal)` and `on_signed_in(request, user)` are the view's (sso/views.py)."""

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


class ProviderBackend(OIDCAuthenticationBackend):
    """Signs in the person the provider vouches for. Configured per call from the tenant that the
    callback's state was issued for (sso_states in the session), never from settings."""

    def __init__(self, *args, **kwargs):
        self.UserModel = get_user_model()

    def get_settings(self, name, *default):
        return _settings(self.provider, self.document, name, default[0] if default else None)

    def authenticate(self, request, nonce=None, code_verifier=None, **kwargs):
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
        self.provider = provider
        self.pending = pending
        self.document = discovery(self.provider)
        self.OIDC_OP_TOKEN_ENDPOINT = self.document["token_endpoint"]
        self.OIDC_OP_USER_ENDPOINT = self.document.get("userinfo_endpoint")
        self.OIDC_OP_JWKS_ENDPOINT = self.document["jwks_uri"]
        self.OIDC_RP_CLIENT_ID = self.provider.client_id
        self.OIDC_RP_CLIENT_SECRET = self.provider.client_secret()
        self.OIDC_RP_SIGN_ALGO = "RS256"
        self.OIDC_RP_IDP_SIGN_KEY = None
        if not self.OIDC_RP_CLIENT_SECRET:
            raise SignInRefused("no_client_secret", "the provider's client secret is not configured")
        try:
            return super().authenticate(request, nonce=nonce, code_verifier=code_verifier)
        except requests.HTTPError as error:
            status = error.response.status_code if error.response is not None else "no answer"
            raise SignInRefused("token_refused", f"the provider refused the code ({status})") from None

    def verify_token(self, token, **kwargs):
        return verified_claims(self, token, nonce=kwargs.get("nonce"))

    def get_or_create_user(self, access_token, id_token, payload):
        """The ID token's claims are signed and checked: the person is matched on them, not on the
        userinfo answer (unsigned, and its `sub` would have to be compared again)."""
        from sso.services import sign_in  # the services import approvals; this module is imported early

        if self.pending.get("purpose") == "step_up":
            idp_step_up.complete(self.request, self.provider, payload, self.pending)
            user = self.UserModel.objects.get(pk=self.pending["user"])
            user.sso_step_up = True  # type: ignore[attr-defined]  # for the callback view, not a field
            return user
        user, device = sign_in(self.provider, payload)
        user.sso_device = device
        user.sso_claims = payload
        return user

    def get_user(self, user_id):
        # The library's get_user skips the active check: a deactivated person's session must end.
        return ModelBackend.get_user(self, user_id)

    def user_can_authenticate(self, user):
        return getattr(user, "is_active", True)


def verified_claims(backend: OIDCAuthenticationBackend, token: str, *, nonce: str | None) -> dict:
    """The ID token's claims when its signature (the provider's JWKS, an asymmetric algorithm), issuer,
    audience, authorized party, expiry, issue time and nonce are all right; SignInRefused otherwise."""
    provider = backend.provider
    try:
        header = jwt.get_unverified_header(token or "")
    except jwt.DecodeError:
        raise SignInRefused("malformed_token", "the provider sent no well-formed ID token") from None
    if header.get("alg") not in ALGORITHMS:
        raise SignInRefused("bad_algorithm", f"ID tokens signed with {header.get('alg')!r} are not accepted")
    backend.OIDC_RP_SIGN_ALGO = header["alg"]
    try:
        key = backend.retrieve_matching_jwk(token)
    except (SuspiciousOperation, requests.RequestException, jwt.PyJWTError):
        raise SignInRefused(
            "unknown_key", "the ID token is signed by a key the provider does not publish"
        ) from None
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=[header["alg"]],
            audience=provider.client_id,
            issuer=provider.issuer,
            leeway=CLOCK_SKEW_SECONDS,
            options={"require": ["iss", "aud", "sub", "exp", "iat"]},
        )
    except jwt.InvalidSignatureError:
        raise SignInRefused("bad_signature", "the ID token's signature does not verify") from None
    except jwt.ExpiredSignatureError:
        raise SignInRefused("expired", "the ID token has expired") from None
    except jwt.InvalidAudienceError:
        raise SignInRefused("wrong_audience", "the ID token was issued for another client") from None
    except jwt.InvalidIssuerError:
        raise SignInRefused("wrong_issuer", "the ID token was issued by another provider") from None
    except jwt.PyJWTError as error:
        raise SignInRefused("bad_token", f"the ID token is not valid ({error})") from None
    audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    if len(audiences) > 1 and claims.get("azp") != provider.client_id:
        raise SignInRefused("wrong_audience", "the ID token names other audiences and not us as its party")
    if not nonce or not hmac.compare_digest(str(claims.get("nonce", "")), nonce):
        raise SignInRefused("bad_nonce", "the ID token's nonce is not this sign-in's (a replayed token?)")
    return claims


def refusal_of(error: Exception | None) -> SignInRefused:
    if isinstance(error, SignInRefused):
        return error
    return SignInRefused("unknown_state", "this sign-in was not started here or was used already")
