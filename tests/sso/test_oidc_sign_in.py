"""Sign-in through the tenant's OpenID Connect provider, against a real provider on loopback.

The provider (tests/sso/oidc_idp) stands in for Okta, Entra ID, Google or Keycloak, which this machine
cannot reach: django-oauth-toolkit's certified-protocol OIDC mode, so Reviewer's relying party (sso/oidc/,
mozilla-django-oidc) runs the real authorization code flow with PKCE, state and nonce, the real token
exchange and the real JWKS signature check.
"""

import pytest
from django.contrib.auth import get_user_model

from audit.models import AuditEvent, Verb
from sso.models import ExternalIdentity
from tenants.models import TenantMembership
from tests import factories
from tests.factories import trail_name
from tests.sso.conftest import sign_in_through_provider

pytestmark = pytest.mark.django_db


def test_first_sign_in_creates_the_person_just_in_time_and_verifies_the_session(
    client, oidc_idp, identity_provider, tenant
):
    subject = oidc_idp.add_user("dana", email="dana@acme.example")

    answer = sign_in_through_provider(client, oidc_idp, "dana")

    assert answer.status_code == 302 and answer["Location"] == "/"
    identity = ExternalIdentity.objects.get(issuer=oidc_idp.issuer, subject=subject)
    assert identity.user.email == "dana@acme.example"
    assert not identity.user.has_usable_password()
    assert TenantMembership.objects.get(tenant=tenant, user=identity.user).role == "reviewer"
    assert client.get("/").status_code == 200  # the queue: a verified session (the provider's device)
    verbs = list(
        AuditEvent.objects.filter(subject=trail_name("dana@acme.example")).values_list("verb", flat=True)
    )
    assert Verb.PERSON_PROVISIONED in verbs and Verb.SSO_SIGNED_IN in verbs


def test_the_same_subject_signs_in_to_the_same_account(client, oidc_idp, identity_provider):
    oidc_idp.add_user("erin", email="erin@acme.example")
    sign_in_through_provider(client, oidc_idp, "erin")
    client.logout()

    sign_in_through_provider(client, oidc_idp, "erin")

    assert get_user_model().objects.filter(email="erin@acme.example").count() == 1


def test_a_local_account_with_the_same_email_is_not_taken_over(client, oidc_idp, identity_provider, tenant):
    """Matching is by issuer and subject only: an e-mail address alone never hands over an account."""
    local = factories.make_user("frank@acme.example", tenant=tenant)
    local.email = "frank@acme.example"
    local.save()
    oidc_idp.add_user("frank", email="frank@acme.example")

    sign_in_through_provider(client, oidc_idp, "frank")

    identity = ExternalIdentity.objects.get(issuer=oidc_idp.issuer)
    assert identity.user != local
    assert identity.user.username == "frank@acme.example+2"


def test_someone_not_provisioned_is_refused_when_the_tenant_creates_no_one(
    client, oidc_idp, identity_provider
):
    identity_provider.create_users = False
    identity_provider.save()
    oidc_idp.add_user("gina", email="gina@acme.example")
    people = get_user_model().objects.count()

    answer = sign_in_through_provider(client, oidc_idp, "gina")

    assert answer.status_code == 400
    assert b"no account at Acme Payments belongs to this identity yet" in answer.content
    assert get_user_model().objects.count() == people
    assert client.get("/").status_code == 302  # not signed in
    assert AuditEvent.objects.filter(verb=Verb.SSO_REFUSED).exists()


def test_an_email_outside_the_allowed_domains_is_refused(client, oidc_idp, identity_provider):
    oidc_idp.add_user("hank", email="hank@elsewhere.example")

    answer = sign_in_through_provider(client, oidc_idp, "hank")

    assert answer.status_code == 400
    assert b"not in a domain this tenant allows" in answer.content
    assert not ExternalIdentity.objects.exists()


@pytest.mark.parametrize("email_verified", [False, "false", "true", 1, None, {}])
def test_an_email_verified_claim_other_than_true_is_refused(
    client, oidc_idp, identity_provider, email_verified
):
    oidc_idp.add_user("ivy", email="ivy@acme.example", email_verified=email_verified)

    answer = sign_in_through_provider(client, oidc_idp, "ivy")

    assert answer.status_code == 400
    assert b"has not verified this e-mail address" in answer.content
    assert not ExternalIdentity.objects.exists()
    assert AuditEvent.objects.get(verb=Verb.SSO_REFUSED).data["code"] == "email_unverified"


def test_a_provider_that_sends_no_email_verified_claim_is_trusted_with_the_address(
    client, oidc_idp, identity_provider
):
    oidc_idp.add_user("jo", email="jo@acme.example", email_verified=...)

    assert sign_in_through_provider(client, oidc_idp, "jo").status_code == 302

    assert ExternalIdentity.objects.get().email == "jo@acme.example"


def test_a_replayed_callback_is_refused(client, oidc_idp, identity_provider):
    """The provider's redirect back (code and state) is usable once: the state is gone after its first use."""
    oidc_idp.add_user("ivan", email="ivan@acme.example")
    start = client.get("/accounts/sso/acme/")
    back = oidc_idp.sign_in(start["Location"], "ivan").removeprefix("http://testserver")
    assert client.get(back).status_code == 302
    client.logout()
    events = AuditEvent.objects.filter(verb=Verb.SSO_SIGNED_IN).count()

    replay = client.get(back)

    assert replay.status_code == 400
    assert b"not started here or was used already" in replay.content
    assert AuditEvent.objects.filter(verb=Verb.SSO_SIGNED_IN).count() == events
    assert client.get("/").status_code == 302


def test_a_deactivated_person_is_refused(client, oidc_idp, identity_provider):
    oidc_idp.add_user("jane", email="jane@acme.example")
    sign_in_through_provider(client, oidc_idp, "jane")
    client.logout()
    get_user_model().objects.filter(email="jane@acme.example").update(is_active=False)

    answer = sign_in_through_provider(client, oidc_idp, "jane")

    assert answer.status_code == 400 and b"deactivated" in answer.content


def test_an_error_from_the_provider_is_shown(client, identity_provider):
    client.get("/accounts/sso/acme/")
    answer = client.get("/accounts/sso/callback?error=access_denied&state=whatever")
    assert answer.status_code == 400
    assert b"did not sign you in (access_denied)" in answer.content


def test_a_tenant_without_a_provider_has_no_sign_in_page(client, tenant):
    assert client.get("/accounts/sso/acme/").status_code == 404


def test_the_organisation_form_finds_the_provider_by_email_domain(client, identity_provider):
    answer = client.post("/accounts/sso/", {"organisation": "someone@acme.example"})
    assert answer.status_code == 200 and b'href="/accounts/sso/acme/"' in answer.content
    unknown = client.post("/accounts/sso/", {"organisation": "someone@nowhere.example"})
    assert unknown.status_code == 400
