"""The cross-tenant SCIM attack against real processes: Reviewer under Daphne and its worker on the test
database (PostgreSQL in CI), two tenants whose providers share an issuer (Google Workspace's), each
directory's client scim2-client over HTTP with its own bearer token. Tenant B's client claims A's
person's externalId with an attacker's address; A's person keeps their address and tenant, and A's
deprovisioning then ends the account for good."""

import httpx2
import pytest
from scim2_client.engines.httpx2 import SyncSCIMClient

from sso.models import IdentityProvider, ScimUser
from sso.scim.auth import issue_token
from tenants.models import TenantMembership

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
SHARED_ISSUER = "https://accounts.google.com"


def directory_client(url: str, tenant) -> SyncSCIMClient:
    provider = IdentityProvider.objects.create(
        tenant=tenant, display_name="Google", issuer=SHARED_ISSUER, client_id=f"reviewer-{tenant.slug}"
    )
    client = SyncSCIMClient(
        httpx2.Client(base_url=f"{url}/scim/v2", headers={"Authorization": f"Bearer {issue_token(provider)}"})
    )
    client.discover()
    return client


def create_person(client: SyncSCIMClient, user_name: str, external_id: str, email: str):
    user_model = client.get_resource_model("User")
    assert user_model is not None
    return client.create(
        user_model.model_validate(
            {
                "userName": user_name,
                "externalId": external_id,
                "name": {"givenName": user_name.split("@")[0], "familyName": "X"},
                "emails": [{"value": email, "primary": True}],
                "active": True,
            }
        )
    )


def test_another_tenants_directory_cannot_take_over_a_person_over_http(reviewer_stack, tenant, other_tenant):
    tenant_a_directory = directory_client(reviewer_stack.url, tenant)
    tenant_b_directory = directory_client(reviewer_stack.url, other_tenant)
    pat = create_person(tenant_a_directory, "pat@a.example", "1111", "pat@a.example")

    taken = create_person(tenant_b_directory, "mallory", "1111", "attacker@evil.example")

    pat_account = ScimUser.objects.select_related("user").get(scim_id=pat.id).user
    assert pat_account.email == "pat@a.example"
    assert ScimUser.objects.get(scim_id=taken.id).user_id != pat_account.id
    assert not TenantMembership.objects.filter(tenant=other_tenant, user=pat_account).exists()

    tenant_a_directory.modify(  # Okta's unassignment: PATCH active false
        tenant_a_directory.get_resource_model("User"),
        pat.id,
        {
            "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
            "Operations": [{"op": "replace", "value": {"active": False}}],
        },
        check_request_payload=False,
    )
    pat_account.refresh_from_db()
    assert not pat_account.is_active
    assert not TenantMembership.objects.filter(user=pat_account).exists()
