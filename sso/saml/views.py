"""SAML 2.0 sign-in per tenant: djangosaml2's views on pysaml2, configured from the tenant's
IdentityProvider (protocol "saml") instead of settings (sso/saml/config.py).

The assertion consumer refuses early an assertion of another issuer or one already used, requires the
checks of sso/saml/assertions.py and a bearer confirmation whose Recipient is this tenant's consumer URL,
accepts an assertion once (SamlAssertionSeen, in the database, so every process sees it), and matches
the person by (issuer, NameID) through the same sign-in service as OpenID Connect
(sso/sign_in/services.py `sign_in`): never by e-mail, groups through the tenant's mapping.
"""

from datetime import timedelta

from django.contrib import auth
from django.db import IntegrityError, transaction
from django.shortcuts import render
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from django_otp import login as otp_login
from djangosaml2.views import AssertionConsumerServiceView, LoginView, MetadataView
from saml2.saml import SCM_BEARER

from sso.errors import SignInRefused
from sso.models import SamlAssertionSeen
from sso.saml.assertions import claims_of, expiry, refusal_of, unverified_names, weak_algorithms
from sso.saml.config import CLOCK_SKEW_SECONDS, acs_url, saml_provider, sp_config
from sso.sign_in import services

BACKEND = "sso.oidc.ProviderBackend"  # its get_user refuses a deactivated account, as for OIDC sign-ins


def refused(request, provider, refusal: SignInRefused, issuer: str = ""):
    services.record_refusal(provider, refusal, issuer=issuer)
    return render(request, "sso/refused.html", {"refusal": refusal}, status=400)


class TenantConfig(View):
    """The tenant's SAML provider, from the URL, for djangosaml2's views (which read settings otherwise)."""

    def dispatch(self, request, *args, tenant_slug: str, **kwargs):
        self.provider = saml_provider(tenant_slug)
        return super().dispatch(request, *args, **kwargs)

    def get_sp_config(self, request):
        return sp_config(request, self.provider)


class SamlLogin(TenantConfig, LoginView):
    """GET /accounts/sso/saml/<tenant>/login/: off to the provider with an AuthnRequest (HTTP-Redirect)."""


class SamlMetadata(TenantConfig, MetadataView):
    """GET /accounts/sso/saml/<tenant>/metadata/: Reviewer's service-provider metadata for the provider."""


# The provider's answer is a cross-site POST that carries no CSRF token: djangosaml2 exempts its
# consumer's dispatch, which TenantConfig's dispatch replaces, so the exemption is restated here. What
# stands instead: the signature, audience and Recipient, each assertion once, and InResponseTo a request
# this browser started (allow_unsolicited off), kept in djangosaml2's SameSite=None session cookie.
@method_decorator(csrf_exempt, name="dispatch")
class SamlAssertionConsumer(TenantConfig, AssertionConsumerServiceView):
    """POST /accounts/sso/saml/<tenant>/acs/: the provider's response; a sign-in or a page saying why not."""

    def post(self, request, *args, **kwargs):
        self.validation_refusal = None
        issuer, assertion_id = unverified_names(request.POST.get("SAMLResponse", ""))
        try:
            if issuer != self.provider.issuer:
                raise SignInRefused(
                    "unknown_issuer",
                    f"the assertion was issued by {issuer or 'no one named'}, "
                    "not by this organisation's identity provider",
                )
            if SamlAssertionSeen.objects.filter(issuer=issuer, assertion_id=assertion_id).exists():
                raise SignInRefused("replayed", "this assertion was used already (a replayed sign-in)")
            return super().post(request)
        except SignInRefused as refusal:
            return refused(request, self.provider, refusal, issuer)

    def custom_validation(self, response):
        """The signatures pysaml2 verified must use strong algorithms, and the Recipient of the bearer
        confirmation it accepted must be this tenant's consumer URL."""
        weak = weak_algorithms(response)
        if weak:
            self.validation_refusal = SignInRefused(
                "weak_signature",
                "the assertion is signed with an algorithm no longer accepted (SHA-1); "
                "the provider must sign with SHA-256 or stronger",
            )
            raise self.validation_refusal
        expected = acs_url(self.request, self.provider)
        bearers = [
            confirmation
            for confirmation in response.assertion.subject.subject_confirmation
            if confirmation.method == SCM_BEARER
        ]
        if not bearers or any(
            confirmation.subject_confirmation_data is None
            or confirmation.subject_confirmation_data.recipient != expected
            for confirmation in bearers
        ):
            self.validation_refusal = SignInRefused(
                "wrong_recipient", "the assertion was addressed to another service (its Recipient)"
            )
            raise self.validation_refusal

    def handle_acs_failure(self, request, exception=None, status=403, **kwargs):
        refusal = self.validation_refusal or refusal_of(exception)
        return refused(request, self.provider, refusal, self.provider.issuer)

    def authenticate_user(
        self, request, session_info, attribute_mapping, create_unknown_user, assertion_info
    ):
        provider = self.provider
        if session_info.get("issuer") != provider.issuer:
            raise SignInRefused(
                "unknown_issuer", "the assertion was not issued by this organisation's provider"
            )
        claims = claims_of(provider, session_info)
        with transaction.atomic():
            try:
                with transaction.atomic():
                    SamlAssertionSeen.objects.create(
                        issuer=provider.issuer,
                        assertion_id=str(assertion_info.get("assertion_id") or "")[:256],
                        expires_at=expiry(assertion_info.get("not_on_or_after")),
                    )
            except IntegrityError:  # the same assertion, accepted by another request meanwhile
                raise SignInRefused(
                    "replayed", "this assertion was used already (a replayed sign-in)"
                ) from None
            user, device = services.sign_in(provider, claims)
            # Past its NotOnOrAfter (and the clock skew) an assertion is refused as expired anyway.
            SamlAssertionSeen.objects.filter(
                expires_at__lt=timezone.now() - timedelta(seconds=2 * CLOCK_SKEW_SECONDS)
            ).delete()
        auth.login(request, user, backend=BACKEND)
        otp_login(request, device)
        return user
