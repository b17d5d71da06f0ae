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
