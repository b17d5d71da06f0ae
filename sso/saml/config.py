"""Reviewer as a tenant's SAML service provider, for pysaml2: its entity ID (the metadata URL), its
assertion consumer URL, and the tenant's provider from its metadata and nothing else."""

import shutil

import saml2
from defusedxml import ElementTree
from django.conf import settings
from django.http import Http404
from django.urls import reverse
from saml2.config import SPConfig
from saml2.saml import NAMEID_FORMAT_PERSISTENT

from sso.models import IdentityProvider

CLOCK_SKEW_SECONDS = 60


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


def metadata_entity_id(metadata: str) -> str:
    """The entityID a provider's metadata XML declares ("" when it is not metadata)."""
    try:
        root = ElementTree.fromstring(metadata.encode())
    except (ValueError, ElementTree.ParseError):
        return ""
    if root.tag != "{urn:oasis:names:tc:SAML:2.0:metadata}EntityDescriptor":
        return ""
    return root.get("entityID", "")
