"""Approver groups from the identity provider: the tenant maps the provider's group names to approver
groups, and each sign-in through the loopback provider (tests/sso/oidc_idp, standing in for the company's
IdP) brings the provider-managed memberships up to date; an admin's own memberships are left alone."""

import pytest

from audit.models import AuditEvent, Verb
from sso.models import ExternalIdentity
from tenants.models import GroupMembership, ProviderGroupMapping
from tests import factories
from tests.sso.conftest import sign_in_through_provider

pytestmark = pytest.mark.django_db


@pytest.fixture
def mappings(tenant):
    finance, ops = factories.make_group(tenant, "finance"), factories.make_group(tenant, "ops")
    ProviderGroupMapping.objects.create(tenant=tenant, external_name="payments-approvers", group=finance)
    ProviderGroupMapping.objects.create(tenant=tenant, external_name="sre", group=ops)
    return finance, ops


def memberships(user) -> dict:
    return dict(GroupMembership.objects.filter(user=user).values_list("group__slug", "managed_by"))


def test_sign_in_joins_the_mapped_groups_as_provider_managed(client, oidc_idp, identity_provider, mappings):
    oidc_idp.add_user("mia", email="mia@acme.example", groups=["payments-approvers", "unmapped-group"])

    sign_in_through_provider(client, oidc_idp, "mia")

    user = ExternalIdentity.objects.get().user
    assert memberships(user) == {"finance": "idp"}
    added = AuditEvent.objects.get(verb=Verb.GROUP_MEMBER_ADDED, subject="group:finance")
    assert added.data == {"group": "finance", "user": factories.trail_name(user.username)}
    signed_in = AuditEvent.objects.get(verb=Verb.SSO_SIGNED_IN)
    assert signed_in.data["groups_added"] == ["finance"]


def test_a_group_removed_at_the_provider_ends_the_membership_at_the_next_sign_in(
    client, oidc_idp, identity_provider, mappings
):
    oidc_idp.add_user("ned", email="ned@acme.example", groups=["payments-approvers"])
    sign_in_through_provider(client, oidc_idp, "ned")
    client.logout()
    oidc_idp.add_user("ned", email="ned@acme.example", groups=["sre"])

    sign_in_through_provider(client, oidc_idp, "ned")

    user = ExternalIdentity.objects.get().user
    assert memberships(user) == {"ops": "idp"}
    assert AuditEvent.objects.filter(verb=Verb.GROUP_MEMBER_REMOVED, subject="group:finance").exists()


def test_a_membership_an_admin_made_is_not_touched(client, oidc_idp, identity_provider, mappings, tenant):
    oidc_idp.add_user("olga", email="olga@acme.example", groups=[])
    sign_in_through_provider(client, oidc_idp, "olga")
    user = ExternalIdentity.objects.get().user
    GroupMembership.objects.create(group=mappings[0], user=user)  # by hand, in the admin
    client.logout()

    sign_in_through_provider(client, oidc_idp, "olga")

    assert memberships(user) == {"finance": ""}


def test_compliance_staff_join_no_group_whatever_the_provider_says(
    client, oidc_idp, identity_provider, mappings, tenant
):
    from tenants.models import TenantMembership

    subject = oidc_idp.add_user("pia", email="pia@acme.example", groups=["payments-approvers"])
    person = factories.make_user("pia", tenant=tenant, role=TenantMembership.Role.COMPLIANCE, totp=False)
    ExternalIdentity.objects.create(
        provider=identity_provider, issuer=oidc_idp.issuer, subject=subject, user=person
    )

    assert sign_in_through_provider(client, oidc_idp, "pia").status_code == 302
    assert memberships(person) == {}


def test_a_groups_claim_that_is_not_a_list_of_names_is_refused(identity_provider):
    from sso.errors import SignInRefused
    from sso.sign_in.services import sign_in

    with pytest.raises(SignInRefused) as refused:
        sign_in(identity_provider, {"sub": "x", "email": "q@acme.example", "groups": [{"id": 1}]})
    assert refused.value.code == "bad_groups"
    assert not ExternalIdentity.objects.exists()
