"""SAML 2.0 sign-in per tenant: djangosaml2's views on pysaml2, configured from the tenant's
IdentityProvider (protocol "saml") instead of settings.

pysaml2 checks the response's XML signature against the certificate in the provider's metadata (and
only that provider's: an unknown issuer has no key), the assertion's audience (Reviewer's entity ID for
this tenant), its validity window, the response's Destination, and its InResponseTo (a request this
browser started). Reviewer adds what pysaml2 leaves to the service provider: the assertion itself must
be signed (`want_assertions_signed`), the bearer confirmation's Recipient must be this tenant's
assertion consumer URL, its signatures must use SHA-256 or stronger (pysaml2 still accepts
SHA-1, its own default), an assertion is accepted once (SamlAssertionSeen, in the database, so every
process sees it), and the person is matched by (issuer, NameID) through the same sign-in service as
OpenID Connect (sso/services.py `sign_in`): never by e-mail, groups through the tenant's mapping.
"""

import base64
import binascii
import shutil
from datetime import UTC, datetime, timedelta

import saml2
from defusedxml import ElementTree
from django.conf import settings
from django.contrib import auth
from django.core.exceptions import SuspiciousOperation
from django.db import IntegrityError, transaction
from django.http import Http404
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views import View
from django_otp import login as otp_login
from djangosaml2.views import AssertionConsumerServiceView, LoginView, MetadataView
from saml2.config import SPConfig
from saml2.response import UnsolicitedResponse
from saml2.saml import NAMEID_FORMAT_PERSISTENT, NAMEID_FORMAT_TRANSIENT, SCM_BEARER
from saml2.sigver import MissingKey, SignatureError
from saml2.validate import ResponseLifetimeExceed, ToEarly

from sso import services
from sso.errors import SignInRefused
from sso.models import IdentityProvider, SamlAssertionSeen

ASSERTION = "{urn:oasis:names:tc:SAML:2.0:assertion}"
BACKEND = "sso.oidc.ProviderBackend"  # its get_user refuses a deactivated account, as for OIDC sign-ins
CLOCK_SKEW_SECONDS = 60
SEEN_FALLBACK = timedelta(hours=1)  # how long an assertion without NotOnOrAfter is remembered
# The XML signature algorithms accepted (an allow-list: SHA-1, and anything unknown, is refused).
STRONG_SIGNATURE_METHODS = frozenset(
    f"http://www.w3.org/2001/04/xmldsig-more#{name}"
    for name in ("rsa-sha256", "rsa-sha384", "rsa-sha512", "ecdsa-sha256", "ecdsa-sha384", "ecdsa-sha512")
)
STRONG_DIGEST_METHODS = frozenset(
    {
        "http://www.w3.org/2001/04/xmlenc#sha256",
        "http://www.w3.org/2001/04/xmldsig-more#sha384",
        "http://www.w3.org/2001/04/xmlenc#sha512",
    }
)


def saml_provider(tenant_slug: str) -> IdentityProvider:
    provider = (
        IdentityProvider.objects.select_related("tenant")
        .filter(tenant__slug=tenant_slug, enabled=True, protocol=IdentityProvider.Protocol.SAML)
        .first()
    )
    if provider is None:
        raise Http404("this organisation does not sign in through a SAML identity provider")
    return provider


def acs_url(request, provider) -> str:
    return request.build_absolute_uri(reverse("sso:saml_acs", args=[provider.tenant.slug]))


def sp_config(request, provider: IdentityProvider) -> SPConfig:
    """Reviewer as this tenant's service provider: its own entity ID (the metadata URL) and consumer
    URL, the provider's metadata and nothing else, signed assertions required."""
    config = SPConfig()
    config.load(
        {
            "entityid": request.build_absolute_uri(reverse("sso:saml_metadata", args=[provider.tenant.slug])),
            "xmlsec_binary": settings.SAML_XMLSEC_BINARY or shutil.which("xmlsec1"),
            "allow_unknown_attributes": True,
            "accepted_time_diff": CLOCK_SKEW_SECONDS,
            "metadata": {"inline": [provider.saml_metadata]},
            "service": {
                "sp": {
                    "name": f"Reviewer ({provider.tenant.name})",
                    "endpoints": {
                        "assertion_consumer_service": [(acs_url(request, provider), saml2.BINDING_HTTP_POST)]
                    },
                    "want_assertions_signed": True,
                    "want_response_signed": False,  # Okta, Entra ID and Google sign the assertion
                    "allow_unsolicited": False,  # only answers to a request this browser started
                    "authn_requests_signed": False,
                    "name_id_format": NAMEID_FORMAT_PERSISTENT,
                    "name_id_format_allow_create": True,
                }
            },
        }
    )
    return config


def unverified_names(saml_response: str) -> tuple[str, str]:
    """(issuer, assertion ID) as the response names them, before anything is checked: only used to
    refuse early (another issuer, an assertion already used), never to accept."""
    try:
        root = ElementTree.fromstring(base64.b64decode(saml_response, validate=False))
    except (binascii.Error, ValueError, ElementTree.ParseError):
        return "", ""
    assertion = root.find(f"{ASSERTION}Assertion")
    issuer = root.findtext(f"{ASSERTION}Issuer")
    if not issuer and assertion is not None:
        issuer = assertion.findtext(f"{ASSERTION}Issuer")
    return (issuer or "").strip(), (assertion.get("ID", "") if assertion is not None else "")


def refusal_of(exception) -> SignInRefused:
    """pysaml2's refusal in Reviewer's terms (docs/agents/errors.md, "Single sign-on")."""
    text = str(exception or "")
    if isinstance(exception, SignInRefused):
        return exception
    if isinstance(exception, SignatureError) and "missing" in text.lower():
        return SignInRefused(
            "unsigned_assertion", "the assertion is not signed; only signed ones are accepted"
        )
    if isinstance(exception, SignatureError | MissingKey):
        return SignInRefused(
            "bad_signature", "the assertion's signature does not verify with the provider's certificate"
        )
    if isinstance(exception, ResponseLifetimeExceed):
        return SignInRefused("expired", "the assertion has expired")
    if isinstance(exception, ToEarly):
        return SignInRefused("not_yet_valid", "the assertion is not valid yet (check the provider's clock)")
    if "AudienceRestriction" in text:
        return SignInRefused("wrong_audience", "the assertion was issued for another service, not this one")
    if isinstance(exception, UnsolicitedResponse):
        return SignInRefused("unknown_state", "this sign-in was not started here or was used already")
    if isinstance(exception, SuspiciousOperation) and "Unknown SAML2 error" in text:
        # pysaml2 answers None for a response addressed elsewhere (its Destination)
        return SignInRefused("wrong_recipient", "the response was addressed to another service")
    return SignInRefused("bad_assertion", "the provider's response is not a valid SAML assertion")


def metadata_entity_id(metadata: str) -> str:
    """The entityID a provider's metadata XML declares ("" when it is not metadata)."""
    try:
        root = ElementTree.fromstring(metadata.encode())
    except (ValueError, ElementTree.ParseError):
        return ""
    if root.tag != "{urn:oasis:names:tc:SAML:2.0:metadata}EntityDescriptor":
        return ""
    return root.get("entityID", "")


def refused(request, provider, refusal: SignInRefused, issuer: str = ""):
    services.record_refusal(provider, refusal, issuer=issuer)
    return render(request, "sso/refused.html", {"refusal": refusal}, status=400)


def claims_of(provider: IdentityProvider, session_info: dict) -> dict:
    """The assertion's person in the terms of sso.services.sign_in: the NameID as the subject, the
    e-mail and group attributes the tenant names."""
    name_id = session_info.get("name_id")
    if name_id is None or not (name_id.text or "").strip():
        raise SignInRefused("no_subject", "the assertion names no one (no NameID)")
    if name_id.format == NAMEID_FORMAT_TRANSIENT:
        raise SignInRefused(
            "transient_name_id", "the provider sends a transient NameID, which names no one for good"
        )
    attributes = session_info.get("ava") or {}
    emails = attributes.get(provider.saml_email_attribute) or [""]
    claims = {provider.subject_claim: name_id.text.strip(), "email": emails[0]}
    if provider.groups_claim:
        claims[provider.groups_claim] = list(attributes.get(provider.groups_claim) or [])
    return claims


def weak_algorithms(response) -> list[str]:
    """The signature and digest algorithms of the response's and the assertion's signatures that are
    not on the allow-lists above."""
    weak = []
    for signed in (response.response, response.assertion):
        signature = getattr(signed, "signature", None)
        if signature is None or signature.signed_info is None:
            continue
        info = signature.signed_info
        method = info.signature_method.algorithm if info.signature_method is not None else ""
        if method not in STRONG_SIGNATURE_METHODS:
            weak.append(method or "no signature method")
        for reference in info.reference:
            digest = reference.digest_method.algorithm if reference.digest_method is not None else ""
            if digest not in STRONG_DIGEST_METHODS:
                weak.append(digest or "no digest method")
    return weak


def _expiry(value: str | None) -> datetime:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return timezone.now() + SEEN_FALLBACK


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
                        expires_at=_expiry(assertion_info.get("not_on_or_after")),
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
