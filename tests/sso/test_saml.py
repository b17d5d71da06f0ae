"""SAML 2.0 sign-in against a SAML identity provider built with pysaml2 on loopback (tests/sso/saml_idp,
standing in for Okta, Entra ID, Google or Keycloak): a signed assertion signs the person in, matched by
issuer and NameID, with their groups from a SAML attribute through the tenant's mapping; unsigned,
forged, misaddressed, foreign, expired and replayed assertions are refused with a clear page and change
nothing but the audit trail."""

import html
from datetime import timedelta
from urllib.parse import urlencode, urlparse

import httpx
import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from audit.models import AuditEvent, Verb
from sso.models import ExternalIdentity, IdentityProvider, SamlAssertionSeen
from tenants.models import GroupMembership, ProviderGroupMapping
from tests import factories
from tests.sso.saml_idp.idp import SamlIdentityProvider, posted_form

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def saml_idp():
    idp = SamlIdentityProvider().start()
    idp.add_person("uma", "okta-00u-uma", email="uma@acme.example", groups=["Payments approvers", "Other"])
    yield idp
    idp.stop()


@pytest.fixture
def saml_provider(tenant, saml_idp):
    finance = factories.make_group(tenant, "finance")
    ProviderGroupMapping.objects.create(tenant=tenant, external_name="Payments approvers", group=finance)
    return IdentityProvider.objects.create(
        tenant=tenant,
        protocol="saml",
        display_name="Acme SAML",
        issuer=saml_idp.entity_id,
        saml_metadata=saml_idp.metadata,
        saml_email_attribute="email",
        groups_claim="groups",
        allowed_email_domains="acme.example",
        create_users=True,
    )


def provider_form(client, idp, *, user="uma", variant="") -> tuple[str, dict]:
    """The browser's way to the provider: the tenant's sign-in, Reviewer's AuthnRequest (a redirect), and
    the provider's auto-posting form back to Reviewer."""
    start = client.get("/accounts/sso/acme/")
    assert start.status_code == 302, start.content[:300]
    login = client.get(start["Location"])
    assert login.status_code == 302 and login["Location"].startswith(idp.entity_id), login.content[:500]
    page = httpx.get(f"{login['Location']}&{urlencode({'user': user, 'variant': variant})}")
    page.raise_for_status()
    return posted_form(page.text)


def post_back(client, action, fields):
    return client.post(urlparse(action).path, fields)


def signed_in(client) -> bool:
    return client.get("/").status_code == 200


def test_a_signed_assertion_signs_in_by_issuer_and_name_id_with_the_mapped_groups(
    client, saml_idp, saml_provider, tenant
):
    action, fields = provider_form(client, saml_idp)
    assert action == "http://testserver/accounts/sso/saml/acme/acs/"

    answer = post_back(client, action, fields)

    assert answer.status_code == 302, answer.content[:800]
    assert signed_in(client)
    identity = ExternalIdentity.objects.get(issuer=saml_idp.entity_id)
    assert identity.subject == "okta-00u-uma" and identity.email == "uma@acme.example"
    assert dict(
        GroupMembership.objects.filter(user=identity.user).values_list("group__slug", "managed_by")
    ) == {"finance": "idp"}
    assert AuditEvent.objects.get(verb=Verb.SSO_SIGNED_IN).data["groups_added"] == ["finance"]
    assert SamlAssertionSeen.objects.filter(issuer=saml_idp.entity_id).count() == 1


def test_the_consumer_takes_the_providers_post_which_carries_no_csrf_token(saml_idp, saml_provider):
    browser = Client(enforce_csrf_checks=True)  # as a browser: the provider's page has no CSRF token

    answer = post_back(browser, *provider_form(browser, saml_idp))

    assert answer.status_code == 302, answer.content[:300]
    assert signed_in(browser)


def test_an_answer_to_a_request_another_browser_started_is_refused(client, saml_idp, saml_provider):
    """A forged sign-in: an attacker's own answer posted from their page by the victim's browser, which
    does not hold the attacker's outstanding request (djangosaml2's SameSite=None session)."""
    action, fields = provider_form(Client(), saml_idp)  # the attacker's browser starts the sign-in

    answer = post_back(Client(enforce_csrf_checks=True), action, fields)

    assert answer.status_code == 400
    assert AuditEvent.objects.get(verb=Verb.SSO_REFUSED).data["code"] == "unknown_state"
    assert not ExternalIdentity.objects.exists() and not SamlAssertionSeen.objects.exists()


def test_a_local_account_with_the_same_e_mail_is_not_taken_over(client, saml_idp, saml_provider, tenant):
    local = factories.make_user("uma-local", tenant=tenant)
    local.email = "uma@acme.example"
    local.save()

    assert post_back(client, *provider_form(client, saml_idp)).status_code == 302

    person = ExternalIdentity.objects.get(issuer=saml_idp.entity_id).user
    assert person.pk != local.pk
    assert not ExternalIdentity.objects.filter(user=local).exists()


@pytest.mark.parametrize(
    "variant, code, words",
    [
        ("unsigned", "unsigned_assertion", "the assertion is not signed"),
        ("wrong_audience", "wrong_audience", "issued for another service"),
        ("wrong_recipient", "wrong_recipient", "addressed to another service"),
        ("forged", "bad_signature", "does not verify with the provider's certificate"),
        ("unknown_issuer", "unknown_issuer", "not by this organisation's identity provider"),
        ("sha1", "weak_signature", "signed with an algorithm no longer accepted (SHA-1)"),
    ],
)
def test_a_bad_assertion_is_refused_and_changes_nothing(
    client, saml_idp, saml_provider, variant, code, words
):
    answer = post_back(client, *provider_form(client, saml_idp, variant=variant))

    assert answer.status_code == 400
    page = answer.content.decode()
    assert html.escape(words) in page and f"<code>{code}</code>" in page
    assert not signed_in(client)
    assert not ExternalIdentity.objects.exists() and not SamlAssertionSeen.objects.exists()
    assert AuditEvent.objects.get(verb=Verb.SSO_REFUSED).data["code"] == code


def test_assertions_past_their_lifetime_are_forgotten_at_the_next_sign_in(client, saml_idp, saml_provider):
    old = SamlAssertionSeen.objects.create(
        issuer=saml_idp.entity_id, assertion_id="id-old", expires_at=timezone.now() - timedelta(hours=2)
    )

    assert post_back(client, *provider_form(client, saml_idp)).status_code == 302

    assert not SamlAssertionSeen.objects.filter(pk=old.pk).exists()
    assert SamlAssertionSeen.objects.count() == 1


def test_an_expired_assertion_is_refused(client, saml_idp, saml_provider):
    action, fields = provider_form(client, saml_idp)

    with time_machine.travel(timezone.now() + timedelta(minutes=20)):
        answer = post_back(client, action, fields)

    assert answer.status_code == 400 and b"<code>expired</code>" in answer.content
    assert not ExternalIdentity.objects.exists()


def test_a_replayed_assertion_is_refused_even_from_another_browser(client, saml_idp, saml_provider):
    from django.test import Client

    action, fields = provider_form(client, saml_idp)
    assert post_back(client, action, fields).status_code == 302
    thief = Client()
    provider_form(thief, saml_idp)  # a sign-in of their own under way, so a response is expected there

    answer = post_back(thief, action, fields)

    assert answer.status_code == 400 and b"<code>replayed</code>" in answer.content
    assert not signed_in(thief)
    assert SamlAssertionSeen.objects.count() == 1
    assert AuditEvent.objects.get(verb=Verb.SSO_REFUSED).data["code"] == "replayed"


def test_a_response_nobody_asked_for_is_refused(client, saml_idp, saml_provider):
    from django.test import Client

    action, fields = provider_form(Client(), saml_idp)  # started in another browser, never used

    answer = post_back(client, action, fields)

    assert answer.status_code == 400 and b"<code>unknown_state</code>" in answer.content
    assert not ExternalIdentity.objects.exists()


def test_the_service_provider_metadata_names_the_consumer_url(client, saml_provider):
    answer = client.get("/accounts/sso/saml/acme/metadata/")

    assert answer.status_code == 200
    assert b'entityID="http://testserver/accounts/sso/saml/acme/metadata/"' in answer.content
    assert b'Location="http://testserver/accounts/sso/saml/acme/acs/"' in answer.content
    assert b'WantAssertionsSigned="true"' in answer.content


def test_the_admin_checks_a_saml_provider_against_its_metadata(saml_idp, tenant):
    from sso.admin import IdentityProviderForm

    base = {
        "tenant": tenant.pk,
        "enabled": "on",
        "display_name": "Acme SAML",
        "protocol": "saml",
        "issuer": "https://another.example/idp",
        "saml_metadata": saml_idp.metadata,
        "subject_claim": "sub",
        "scopes": "openid",
        "step_up": "idp",
    }

    form = IdentityProviderForm(data=base)

    assert not form.is_valid()
    assert "the issuer must be exactly that" in str(form.errors["issuer"])
    assert "cannot confirm a vote" in str(form.errors["step_up"])
    garbage = IdentityProviderForm(data={**base, "issuer": saml_idp.entity_id, "saml_metadata": "<x/>"})
    assert not garbage.is_valid() and "metadata XML" in str(garbage.errors["saml_metadata"])


def test_a_saml_entity_id_may_be_a_urn_and_an_oidc_issuer_must_be_a_url(saml_idp, tenant):
    from sso.admin import IdentityProviderForm

    urn_metadata = saml_idp.metadata.replace(saml_idp.entity_id, "urn:acme:saml:idp")
    saml = {
        "tenant": tenant.pk,
        "enabled": "on",
        "display_name": "Acme SAML",
        "protocol": "saml",
        "issuer": "urn:acme:saml:idp",
        "saml_metadata": urn_metadata,
        "subject_claim": "sub",
        "scopes": "openid",
        "step_up": "local",
    }
    oidc = {**saml, "protocol": "oidc", "saml_metadata": "", "client_id": "reviewer"}

    saml_form = IdentityProviderForm(data=saml)
    urn_oidc = IdentityProviderForm(data={**oidc, "issuer": "urn:acme:saml:idp"})
    bare_host = IdentityProviderForm(data={**oidc, "issuer": "acme.okta.example"})

    assert saml_form.is_valid(), saml_form.errors
    assert saml_form.cleaned_data["issuer"] == "urn:acme:saml:idp"
    assert not urn_oidc.is_valid() and "is a URL" in str(urn_oidc.errors["issuer"])
    assert bare_host.is_valid(), bare_host.errors
    assert bare_host.cleaned_data["issuer"] == "https://acme.okta.example"
