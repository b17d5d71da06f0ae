"""Every ID token Reviewer's relying party refuses, each with its reason, checked on real tokens from the
loopback provider (tests/sso/oidc_idp stands in for a company's IdP, which cannot be reached from here)
or on tokens forged from them. `verified_claims` is the check the callback runs; the end-to-end tests in
test_oidc_sign_in.py show that a refusal there changes nothing."""

import base64
import json
from datetime import timedelta

import jwt
import pytest
import time_machine
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth import get_user_model
from django.utils import timezone

from sso.errors import SignInRefused
from sso.oidc.backend import TenantRelyingParty
from sso.oidc.id_token import verified_claims
from sso.oidc.provider import discovery
from tests.sso.conftest import CLIENT_SECRET, provider_id_token, sign_in_through_provider

pytestmark = pytest.mark.django_db


@pytest.fixture
def backend(identity_provider):
    """The library's backend as a callback builds it for the tenant's provider."""
    return TenantRelyingParty(identity_provider, discovery(identity_provider), pending={})


@pytest.fixture(scope="module")
def kate(oidc_idp):
    oidc_idp.add_user("kate", email="kate@acme.example")
    return "kate"


def refusal(backend, token, nonce="n-0") -> str:
    with pytest.raises(SignInRefused) as refused:
        verified_claims(backend, token, nonce=nonce)
    return refused.value.code


def test_a_good_token_is_accepted(backend, oidc_idp, kate):
    claims = verified_claims(backend, provider_id_token(oidc_idp, kate), nonce="n-0")
    assert claims["iss"] == oidc_idp.issuer and claims["aud"] == "reviewer"


def test_a_token_with_changed_claims_is_refused_as_forged(backend, oidc_idp, kate):
    header, payload, signature = provider_id_token(oidc_idp, kate).split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["sub"] = "someone-else"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    assert refusal(backend, f"{header}.{forged}.{signature}") == "bad_signature"


def test_a_token_signed_by_another_key_under_the_providers_key_id_is_refused(backend, oidc_idp, kate):
    genuine = provider_id_token(oidc_idp, kate)
    claims = jwt.decode(genuine, options={"verify_signature": False})
    kid = jwt.get_unverified_header(genuine)["kid"]
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(claims, other_key, algorithm="RS256", headers={"kid": kid})
    assert refusal(backend, forged) == "bad_signature"


def test_a_token_for_another_client_is_refused(backend, oidc_idp, kate):
    """A token the provider really issued, to another application: replayed at Reviewer it must fail."""
    oidc_idp.add_client("other-app", "other-secret", ["http://testserver/accounts/sso/callback"])
    token = provider_id_token(oidc_idp, kate, client_id="other-app", client_secret="other-secret")
    assert refusal(backend, token) == "wrong_audience"


def test_a_token_from_an_unknown_issuer_is_refused(backend, oidc_idp, kate):
    backend.provider.issuer = "https://idp.other.example"
    assert refusal(backend, provider_id_token(oidc_idp, kate)) == "wrong_issuer"


def test_a_discovery_document_for_another_issuer_is_refused(identity_provider):
    identity_provider.issuer += "/"  # the same server, but not the issuer it names
    with pytest.raises(SignInRefused) as refused:
        discovery(identity_provider)
    assert refused.value.code == "wrong_issuer"


def test_an_expired_token_is_refused(backend, oidc_idp, kate):
    token = provider_id_token(oidc_idp, kate)
    with time_machine.travel(timezone.now() + timedelta(hours=1)):
        assert refusal(backend, token) == "expired"


def test_a_token_for_another_sign_in_is_refused_by_its_nonce(backend, oidc_idp, kate):
    token = provider_id_token(oidc_idp, kate, nonce="the-first-sign-in")
    assert refusal(backend, token, nonce="this-sign-in") == "bad_nonce"
    assert refusal(backend, token, nonce=None) == "bad_nonce"


def test_unsigned_and_shared_secret_tokens_are_refused(backend, oidc_idp, kate):
    claims = jwt.decode(provider_id_token(oidc_idp, kate), options={"verify_signature": False})
    unsigned = jwt.encode(claims, None, algorithm="none")
    assert refusal(backend, unsigned) == "bad_algorithm"
    with_secret = jwt.encode(claims, CLIENT_SECRET, algorithm="HS256")
    assert refusal(backend, with_secret) == "bad_algorithm"
    assert refusal(backend, "not a token") == "malformed_token"


def test_an_expired_token_at_the_callback_signs_no_one_in(client, oidc_idp, identity_provider):
    """The whole flow, with Reviewer's clock an hour ahead of the provider's: refused, nothing created."""
    oidc_idp.add_user("leo", email="leo@acme.example")
    people = get_user_model().objects.count()
    with time_machine.travel(timezone.now() + timedelta(hours=1), tick=True):
        answer = sign_in_through_provider(client, oidc_idp, "leo")
    assert answer.status_code == 400 and b"has expired" in answer.content
    assert get_user_model().objects.count() == people
