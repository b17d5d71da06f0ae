"""The admin of single sign-on: superusers configure a tenant's provider and group mappings, each change
audited; the people SCIM and sign-in created are read-only there; other staff see none of it."""

import pytest
from django.contrib.auth import get_user_model

from audit.models import AuditEvent, Verb
from sso.models import IdentityProvider
from tenants.models import ProviderGroupMapping
from tests import factories
from tests.factories import trail_name

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser_client(tenant):
    root = get_user_model().objects.create_superuser("root", "root@example.test", factories.PASSWORD)
    return factories.verified_client(root)


def test_a_superuser_adds_a_provider_and_the_change_is_audited(superuser_client, tenant):
    answer = superuser_client.post(
        "/admin/sso/identityprovider/add/",
        {
            "tenant": tenant.pk,
            "enabled": "on",
            "display_name": "Acme Okta",
            "protocol": "oidc",
            "issuer": "https://acme.okta.example",
            "client_id": "reviewer",
            "client_secret_env": "ACME_OKTA_SECRET",
            "scopes": "openid email profile",
            "subject_claim": "sub",
            "groups_claim": "groups",
            "step_up": "local",
        },
    )

    assert answer.status_code == 302, answer.content[:2000]
    provider = IdentityProvider.objects.get()
    event = AuditEvent.objects.get(verb=Verb.IDENTITY_PROVIDER_CHANGED)
    assert event.actor == trail_name("root") and "client_secret_env" in event.data["changed"]
    assert provider.client_secret() == ""  # the variable is not set: sign-in would refuse


def test_the_saml_section_names_reviewers_urls_for_the_tenant_and_a_placeholder_before(
    superuser_client, tenant
):
    adding = superuser_client.get("/admin/sso/identityprovider/add/").content.decode()
    assert "/accounts/sso/saml/&lt;tenant&#x27;s short name&gt;/metadata/" in adding
    assert "/accounts/sso/saml//" not in adding

    provider = IdentityProvider.objects.create(
        tenant=tenant, display_name="Acme Okta", issuer="https://acme.okta.example", client_id="reviewer"
    )
    changing = superuser_client.get(f"/admin/sso/identityprovider/{provider.pk}/change/").content.decode()
    assert f"/accounts/sso/saml/{tenant.slug}/metadata/" in changing
    assert f"/accounts/sso/saml/{tenant.slug}/acs/" in changing


def test_a_group_mapping_is_audited(superuser_client, tenant):
    finance = factories.make_group(tenant, "finance")

    superuser_client.post(
        "/admin/tenants/providergroupmapping/add/",
        {"tenant": tenant.pk, "external_name": "Payments approvers", "group": finance.pk},
    )

    assert ProviderGroupMapping.objects.get().group == finance
    assert AuditEvent.objects.get(verb=Verb.IDENTITY_PROVIDER_CHANGED).data["what"] == "providergroupmapping"


def test_tenant_admins_who_are_not_superusers_see_none_of_it(admin_user, tenant):
    from approvals.services.tenants import grant_admin_site

    grant_admin_site(tenant, admin_user)
    client = factories.verified_client(admin_user)
    assert client.get("/admin/sso/identityprovider/").status_code == 403


# ---------------------------------------------------------------------------------------------------
# Memberships the provider keeps: shown as such, never edited by hand


@pytest.fixture
def kept_and_made(tenant, reviewer_a, reviewer_b):
    """In finance: reviewer_a by SCIM, reviewer_b by an admin."""
    from tenants.models import GroupMembership

    finance = factories.make_group(tenant, "finance")
    GroupMembership.objects.filter(group=finance, user=reviewer_a).update(managed_by="scim")
    return (
        finance,
        GroupMembership.objects.get(group=finance, user=reviewer_a),
        GroupMembership.objects.get(group=finance, user=reviewer_b),
    )


def test_the_group_page_shows_which_memberships_the_provider_keeps(superuser_client, kept_and_made):
    finance, kept, made = kept_and_made

    answer = superuser_client.get(f"/admin/tenants/approvergroup/{finance.pk}/change/")

    page = answer.content.decode()
    assert "SCIM provisioning" in page and "an admin" in page
    formset = answer.context["inline_admin_formsets"][0].formset
    rows = {form.instance.user_id: form for form in formset.forms if form.instance.pk}
    assert rows[kept.user_id].fields["user"].disabled  # shown, not editable
    assert not rows[made.user_id].fields["user"].disabled


def test_an_admin_cannot_remove_a_membership_the_provider_keeps(superuser_client, kept_and_made):
    from tests.approvals.test_admin import _group_form

    finance, kept, made = kept_and_made

    answer = superuser_client.post(
        f"/admin/tenants/approvergroup/{finance.pk}/change/", _group_form(finance, delete=[kept], keep=[made])
    )

    assert answer.status_code == 200
    assert (
        "kept by SCIM provisioning: change it at the identity provider, not here" in answer.content.decode()
    )
    assert finance.members.filter(pk=kept.user_id).exists()
    assert not AuditEvent.objects.filter(verb=Verb.GROUP_MEMBER_REMOVED).exists()


def test_an_admin_still_removes_a_membership_an_admin_made(superuser_client, kept_and_made):
    from tests.approvals.test_admin import _group_form

    finance, kept, made = kept_and_made

    answer = superuser_client.post(
        f"/admin/tenants/approvergroup/{finance.pk}/change/", _group_form(finance, delete=[made], keep=[kept])
    )

    assert answer.status_code == 302
    assert set(finance.members.values_list("username", flat=True)) == {"reviewer_a"}


def test_the_service_refuses_a_person_removing_a_provider_membership(kept_and_made, tenant):
    from approvals.services.tenants import remove_group_member
    from lib.errors import Conflict

    finance, kept, _ = kept_and_made
    root = get_user_model().objects.create_superuser("root2", "root2@example.test", factories.PASSWORD)

    with pytest.raises(Conflict) as refused:
        remove_group_member(finance, kept.user, actor=root)

    assert refused.value.code == "provider_managed"
    assert finance.members.filter(pk=kept.user_id).exists()
    assert remove_group_member(finance, kept.user)  # the provider's own call (no actor) still does
