"""What Reviewer checks of a SAML response beyond pysaml2, and how a refusal is named.

pysaml2 checks the response's XML signature against the certificate in the provider's metadata (and
only that provider's: an unknown issuer has no key), the assertion's audience (Reviewer's entity ID for
this tenant), its validity window, the response's Destination, and its InResponseTo (a request this
browser started). Reviewer adds here what pysaml2 leaves to the service provider: signatures must use
SHA-256 or stronger (pysaml2 still accepts SHA-1, its own default), the issuer and assertion ID are read
early to refuse another issuer or a used assertion, the NameID must be persistent, and pysaml2's
exceptions become SignInRefused codes (docs/agents/errors.md, "Single sign-on").
"""

import base64
import binascii
from datetime import UTC, datetime, timedelta

from defusedxml import ElementTree
from django.core.exceptions import SuspiciousOperation
from django.utils import timezone
from saml2.response import UnsolicitedResponse
from saml2.saml import NAMEID_FORMAT_TRANSIENT
from saml2.sigver import MissingKey, SignatureError
from saml2.validate import ResponseLifetimeExceed, ToEarly

from sso.errors import SignInRefused
from sso.models import IdentityProvider

ASSERTION = "{urn:oasis:names:tc:SAML:2.0:assertion}"
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


def claims_of(provider: IdentityProvider, session_info: dict) -> dict:
    """The assertion's person in the terms of sso.sign_in.services.sign_in: the NameID as the subject, the
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


def expiry(value: str | None) -> datetime:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return timezone.now() + SEEN_FALLBACK
