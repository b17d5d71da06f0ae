"""One tenant's directory never touches another tenant's people, even where both tenants' providers share
an issuer (Google Workspace has one for every customer): each attack here is performed through the SCIM
endpoints or the sign-in service, as the other tenant's token or provider would."""

import pytest
from django.contrib.auth import get_user_model

from sso.errors import SignInRefused
from sso.models import ExternalIdentity, IdentityProvider, ScimUser
from sso.scim.auth import issue_token
from sso.sign_in.services import sign_in
from tenants.models import TenantMembership
from tests import factories
from tests.sso.test_scim import raw

pytestmark = pytest.mark.django_db
SHARED_ISSUER = "https://accounts.google.com"
USER_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:User"


def provider_of(tenant, *, create_users=False):
    return IdentityProvider.objects.create(
        tenant=tenant,
        display_name=f"{tenant.name} Google",
        issuer=SHARED_ISSUER,
        client_id=f"reviewer-{tenant.slug}",
        create_users=create_users,
    )


def post_user(token, *, user_name, external_id, email, given="Pat", family="Doe"):
    return raw(
        token,
        "post",
        "Users",
        {
            "schemas": [USER_SCHEMA],
            "userName": user_name,
            "externalId": external_id,
            "name": {"givenName": given, "familyName": family},
            "emails": [{"value": email, "primary": True}],
            "active": True,
        },
    )


def deactivate(token, scim_id):
    answer = raw(
        token,
        "patch",
        f"Users/{scim_id}",
        {
            "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
            "Operations": [{"op": "replace", "value": {"active": False}}],
        },
    )
    assert answer.status_code == 200, answer.content


@pytest.fixture
def tenant_a(tenant):
    return tenant


@pytest.fixture
def pat_at_a(tenant_a):
    """A's person, provisioned by A's directory: subject 1111 at the shared issuer."""
    token = issue_token(provider_of(tenant_a))
    answer = post_user(token, user_name="pat@a.example", external_id="1111", email="pat@a.example")
    assert answer.status_code == 201, answer.content
    record = ScimUser.objects.select_related("user").get(tenant=tenant_a, user_name="pat@a.example")
    return record.user, token, str(record.scim_id)


def test_another_tenants_scim_cannot_rewrite_or_join_a_person_at_a_shared_issuer(
    tenant_a, other_tenant, pat_at_a
):
    pat, _, _ = pat_at_a
    b_token = issue_token(provider_of(other_tenant))

    answer = post_user(
        b_token, user_name="mallory", external_id="1111", email="attacker@evil.example", given="Mal"
    )

    assert answer.status_code == 201, answer.content  # B gets a person of its own, not A's
    pat.refresh_from_db()
    assert (pat.email, pat.first_name) == ("pat@a.example", "Pat")  # A's notices still go to A's address
    assert list(TenantMembership.objects.filter(user=pat).values_list("tenant_id", flat=True)) == [
        tenant_a.id
    ]
    bs_person = ScimUser.objects.get(tenant=other_tenant).user
    assert bs_person != pat
    assert bs_person.email == "attacker@evil.example"
    assert ExternalIdentity.objects.filter(subject="1111").count() == 2  # one per tenant's provider


def test_deprovisioning_at_a_ends_the_persons_access_when_another_tenant_used_the_same_subject(
    tenant_a, other_tenant, pat_at_a
):
    pat, a_token, scim_id = pat_at_a
    b_token = issue_token(provider_of(other_tenant))
    assert (
        post_user(b_token, user_name="mallory", external_id="1111", email="x@evil.example").status_code == 201
    )

    deactivate(a_token, scim_id)

    pat.refresh_from_db()
    assert not pat.is_active  # B's same-subject person keeps nothing of A's account alive
    assert not TenantMembership.objects.filter(user=pat).exists()


def test_another_tenants_sign_in_with_the_same_subject_gets_its_own_account(tenant_a, other_tenant, pat_at_a):
    pat, _, _ = pat_at_a
    b_provider = provider_of(other_tenant, create_users=True)

    user, _ = sign_in(b_provider, {"sub": "1111", "email": "attacker@evil.example", "email_verified": True})

    assert user != pat
    pat.refresh_from_db()
    assert pat.email == "pat@a.example"
    assert not TenantMembership.objects.filter(tenant=other_tenant, user=pat).exists()


def test_scim_leaves_the_address_of_an_account_another_tenant_also_has(tenant_a, other_tenant):
    """An account an admin put in two tenants: A's directory updates its own record, not the address
    B's notices go to."""
    shared = factories.make_user("sam", tenant=tenant_a)
    TenantMembership.objects.create(tenant=other_tenant, user=shared)
    token = issue_token(provider_of(tenant_a))
    record = ScimUser.objects.create(tenant=tenant_a, user=shared, user_name="sam")

    answer = raw(
        token,
        "patch",
        f"Users/{record.scim_id}",
        {
            "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
            "Operations": [
                {"op": "replace", "value": {"emails": [{"value": "new@a.example", "primary": True}]}}
            ],
        },
    )

    assert answer.status_code == 200, answer.content
    shared.refresh_from_db()
    assert shared.email == "sam@example.test"


def test_a_sign_in_does_not_bring_back_a_membership_the_directory_ended(tenant_a, other_tenant):
    """A person in two tenants, deprovisioned by A's directory: their account stays (B has them), and
    a sign-in at A's provider is refused while A's record says inactive."""
    provider = provider_of(tenant_a, create_users=True)
    token = issue_token(provider)
    person = factories.make_user("lee", tenant=tenant_a)
    TenantMembership.objects.create(tenant=other_tenant, user=person)
    ExternalIdentity.objects.create(provider=provider, issuer=SHARED_ISSUER, subject="2222", user=person)
    record = ScimUser.objects.create(tenant=tenant_a, user=person, user_name="lee", external_id="2222")
    deactivate(token, str(record.scim_id))

    with pytest.raises(SignInRefused) as refused:
        sign_in(provider, {"sub": "2222", "email": "lee@a.example", "email_verified": True})

    assert refused.value.code == "deprovisioned"
    person.refresh_from_db()
    assert person.is_active
    assert not TenantMembership.objects.filter(tenant=tenant_a, user=person).exists()


def test_provisioning_the_same_subject_twice_in_one_tenant_is_a_conflict(tenant_a, pat_at_a):
    _, token, _ = pat_at_a
    answer = post_user(token, user_name="pat2@a.example", external_id="1111", email="pat2@a.example")
    assert answer.status_code == 409, answer.content
    assert get_user_model().objects.filter(email="pat2@a.example").count() == 0
