"""SCIM 2.0 provisioning driven by scim2-client the way Okta and Entra ID call it (their request shapes
are written out where the client's models would normalize them), each tenant behind its own token."""

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from scim2_models import Error

from audit.models import AuditEvent, Verb
from sso.models import ExternalIdentity, ScimUser
from sso.scim.auth import issue_token
from tenants.models import GroupMembership, ProviderGroupMapping, TenantMembership
from tests import factories
from tests.sso.scim import scim_client

pytestmark = pytest.mark.django_db
SCIM_JSON = "application/scim+json"
USER_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:Group"


@pytest.fixture
def scim_provider(tenant):
    """The tenant's provider configuration; SCIM needs no provider running (only its issuer, for the
    identities it creates)."""
    from sso.models import IdentityProvider

    return IdentityProvider.objects.create(
        tenant=tenant, display_name="Acme IdP", issuer="https://idp.acme.example", client_id="reviewer"
    )


@pytest.fixture
def token(scim_provider):
    return issue_token(scim_provider)


@pytest.fixture
def scim(token):
    return scim_client(token)


@pytest.fixture
def finance_mapping(tenant):
    finance = factories.make_group(tenant, "finance")
    ProviderGroupMapping.objects.create(tenant=tenant, external_name="Payments approvers", group=finance)
    return finance


def raw(token, method, path, body=None):
    """A request as the provisioning client writes it, outside scim2-client's models."""
    client = Client()
    return getattr(client, method)(
        f"/scim/v2/{path}",
        data=json.dumps(body) if body is not None else None,
        content_type=SCIM_JSON,
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def new_user(scim, user_name="quinn@acme.example", external_id="okta-00u1"):
    """POST /Users as Okta sends it, through the model scim2-client built from the server's schemas."""
    user_model = scim.get_resource_model("User")
    return scim.create(
        user_model.model_validate(
            {
                "userName": user_name,
                "externalId": external_id,
                "name": {"givenName": "Quinn", "familyName": "Q"},
                "emails": [{"value": user_name, "primary": True}],
                "active": True,
            }
        )
    )


def new_group(scim, member_ids, name="Payments approvers"):
    group_model = scim.get_resource_model("Group")
    return scim.create(
        group_model.model_validate({"displayName": name, "members": [{"value": v} for v in member_ids]})
    )


def test_create_makes_a_reviewer_of_the_tenant_known_by_issuer_and_subject(scim, tenant):
    created = new_user(scim)

    record = ScimUser.objects.get(scim_id=created.id)
    assert created.user_name == "quinn@acme.example" and created.active is True
    assert TenantMembership.objects.get(tenant=tenant, user=record.user).role == "reviewer"
    assert ExternalIdentity.objects.get(user=record.user).subject == "okta-00u1"
    assert not record.user.has_usable_password()
    assert AuditEvent.objects.get(verb=Verb.PERSON_PROVISIONED).actor == "scim:acme"


def test_okta_and_entra_filters_find_the_person(scim, token):
    created = new_user(scim)

    by_name = raw(token, "get", 'Users?filter=userName eq "quinn@acme.example"').json()
    by_external_id = raw(token, "get", 'Users?filter=externalId eq "okta-00u1"').json()
    nobody = raw(token, "get", 'Users?filter=userName eq "nobody@acme.example"').json()

    assert [r["id"] for r in by_name["Resources"]] == [created.id]
    assert [r["id"] for r in by_external_id["Resources"]] == [created.id]
    assert nobody["totalResults"] == 0


def test_a_second_user_with_the_same_user_name_is_a_conflict(scim, token):
    new_user(scim)
    answer = raw(
        token,
        "post",
        "Users",
        {"schemas": [USER_SCHEMA], "userName": "quinn@acme.example"},
    )
    assert answer.status_code == 409
    assert answer.json()["scimType"] == "uniqueness"


def test_replace_changes_the_name_and_records_it(scim):
    created = new_user(scim)
    changed = created.model_dump()
    changed["name"]["givenName"] = "Quincy"
    changed["emails"] = [{"value": "quincy@acme.example", "primary": True}]

    replaced = scim.replace(type(created).model_validate(changed))

    assert replaced.name.given_name == "Quincy"
    assert ScimUser.objects.get(scim_id=created.id).user.email == "quincy@acme.example"
    assert AuditEvent.objects.filter(verb=Verb.PERSON_CHANGED).exists()


@pytest.mark.parametrize(
    "operations",
    [
        [{"op": "replace", "value": {"active": False}}],  # Okta
        [{"op": "Replace", "path": "active", "value": "False"}],  # Entra ID
    ],
    ids=["okta", "entra"],
)
def test_active_false_deprovisions_at_once(scim, token, tenant, finance_mapping, operations):
    created = new_user(scim)
    record = ScimUser.objects.get(scim_id=created.id)
    group = raw(
        token,
        "post",
        "Groups",
        {
            "schemas": [GROUP_SCHEMA],
            "displayName": "Payments approvers",
            "members": [{"value": created.id}],
        },
    )
    assert group.status_code == 201, group.content
    assert GroupMembership.objects.filter(group=finance_mapping, user=record.user, managed_by="scim").exists()

    answer = raw(
        token,
        "patch",
        f"Users/{created.id}",
        {"schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"], "Operations": operations},
    )

    assert answer.status_code == 200, answer.content
    assert answer.json()["active"] is False
    record.user.refresh_from_db()
    assert not record.user.is_active
    assert not TenantMembership.objects.filter(tenant=tenant, user=record.user).exists()
    assert not GroupMembership.objects.filter(user=record.user).exists()
    event = AuditEvent.objects.get(verb=Verb.PERSON_DEPROVISIONED)
    assert event.data["groups_removed"] == ["finance"] and event.data["account_deactivated"] is True


def test_reactivating_brings_the_person_back_with_their_scim_groups(scim, token, tenant, finance_mapping):
    created = new_user(scim)
    raw(
        token,
        "post",
        "Groups",
        {
            "schemas": [GROUP_SCHEMA],
            "displayName": "Payments approvers",
            "members": [{"value": created.id}],
        },
    )
    patch = {"schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"]}
    raw(
        token,
        "patch",
        f"Users/{created.id}",
        {**patch, "Operations": [{"op": "replace", "value": {"active": False}}]},
    )

    raw(
        token,
        "patch",
        f"Users/{created.id}",
        {**patch, "Operations": [{"op": "replace", "value": {"active": True}}]},
    )

    user = ScimUser.objects.get(scim_id=created.id).user
    user.refresh_from_db()
    assert user.is_active
    assert GroupMembership.objects.filter(group=finance_mapping, user=user, managed_by="scim").exists()


def test_delete_deprovisions_and_keeps_the_account_for_the_record(scim, token):
    created = new_user(scim)
    user = ScimUser.objects.get(scim_id=created.id).user

    scim.delete(type(created), created.id)

    user.refresh_from_db()
    assert not user.is_active and not ScimUser.objects.exists()
    assert raw(token, "get", f"Users/{created.id}").status_code == 404


def test_group_membership_patches_as_okta_and_entra_send_them(scim, token, tenant, finance_mapping):
    first, second = new_user(scim), new_user(scim, "ruth@acme.example", "okta-00u2")
    group = new_group(scim, [])
    patch = {"schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"]}
    first_user = ScimUser.objects.get(scim_id=first.id).user
    second_user = ScimUser.objects.get(scim_id=second.id).user

    raw(
        token,
        "patch",
        f"Groups/{group.id}",
        {
            **patch,
            "Operations": [
                {"op": "add", "path": "members", "value": [{"value": first.id}, {"value": second.id}]}
            ],
        },
    )
    assert set(GroupMembership.objects.filter(group=finance_mapping).values_list("user", flat=True)) == {
        first_user.pk,
        second_user.pk,
    }

    raw(
        token,
        "patch",
        f"Groups/{group.id}",
        {**patch, "Operations": [{"op": "remove", "path": f'members[value eq "{first.id}"]'}]},
    )  # Okta
    raw(
        token,
        "patch",
        f"Groups/{group.id}",
        {**patch, "Operations": [{"op": "Remove", "path": "members", "value": [{"value": second.id}]}]},
    )  # Entra ID

    assert not GroupMembership.objects.filter(group=finance_mapping).exists()
    assert AuditEvent.objects.filter(verb=Verb.GROUP_MEMBER_REMOVED, subject="group:finance").count() == 2


def test_renaming_a_group_moves_its_members_to_the_new_mapping(scim, token, tenant, finance_mapping):
    ops = factories.make_group(tenant, "ops")
    ProviderGroupMapping.objects.create(tenant=tenant, external_name="SRE", group=ops)
    person = new_user(scim)
    group = new_group(scim, [person.id])
    patch = {"schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"]}

    raw(
        token,
        "patch",
        f"Groups/{group.id}",
        {**patch, "Operations": [{"op": "replace", "value": {"displayName": "SRE"}}]},
    )

    user = ScimUser.objects.get(scim_id=person.id).user
    assert dict(GroupMembership.objects.filter(user=user).values_list("group__slug", "managed_by")) == {
        "ops": "scim"
    }


def test_a_member_of_another_tenant_cannot_be_added(scim, token, other_tenant, monkeypatch):
    from sso.models import IdentityProvider

    other = IdentityProvider.objects.create(
        tenant=other_tenant, display_name="Globex", issuer="https://globex.example", client_id="g"
    )
    their_person = new_user(scim_client(issue_token(other)), "sam@globex.example", "g-1")
    group = new_group(scim, [])

    answer = raw(
        token,
        "patch",
        f"Groups/{group.id}",
        {
            "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
            "Operations": [{"op": "add", "path": "members", "value": [{"value": their_person.id}]}],
        },
    )

    assert answer.status_code == 400 and "no user" in answer.json()["detail"]


def test_another_tenants_token_sees_and_changes_nothing_here(scim, token, other_tenant):
    from sso.models import IdentityProvider

    created = new_user(scim)
    other = IdentityProvider.objects.create(
        tenant=other_tenant, display_name="Globex", issuer="https://globex.example", client_id="g"
    )
    their_token = issue_token(other)
    patch = {
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
        "Operations": [{"op": "replace", "value": {"active": False}}],
    }

    assert raw(their_token, "get", f"Users/{created.id}").status_code == 404
    assert raw(their_token, "patch", f"Users/{created.id}", patch).status_code == 404
    assert raw(their_token, "delete", f"Users/{created.id}").status_code == 404
    assert (
        raw(their_token, "get", 'Users?filter=userName eq "quinn@acme.example"').json()["totalResults"] == 0
    )
    assert raw(their_token, "get", "Users").json()["totalResults"] == 0
    assert ScimUser.objects.get(scim_id=created.id).active


@pytest.mark.parametrize("header", ["", "Bearer ", "Bearer rvscim_wrong", "Basic YWRtaW46YWRtaW4="])
def test_requests_without_a_tenants_token_are_refused(token, header, admin_user):
    client = Client()
    client.force_login(admin_user)  # a signed-in session is not a SCIM credential
    answer = (
        client.get("/scim/v2/Users", HTTP_AUTHORIZATION=header) if header else client.get("/scim/v2/Users")
    )
    assert answer.status_code == 401
    assert "token" in answer.json()["detail"]


def test_a_replaced_token_stops_working(scim_provider, token):
    issue_token(scim_provider)
    assert raw(token, "get", "Users").status_code == 401


def test_bad_input_is_refused_with_a_clear_error_and_changes_nothing(token):
    people = get_user_model().objects.count()
    schema = {"schemas": [USER_SCHEMA]}
    assert (
        raw(token, "post", "Users", {**schema, "userName": ""})
        .json()["detail"]
        .startswith("userName is required")
    )
    answer = raw(token, "post", "Users", {**schema, "userName": "x", "emails": [{"value": "not-an-address"}]})
    assert answer.status_code == 400 and "not an e-mail address" in answer.json()["detail"]
    assert get_user_model().objects.count() == people


def test_scim2_client_reads_the_refusals_as_scim_errors(scim):
    user = scim.get_resource_model("User")

    missing = scim.query(user, "not-a-uuid", raise_scim_errors=False)
    bad_filter = scim.query(
        user,
        query_parameters={"filter": 'userName zz "x"'},
        check_request_payload=False,
        raise_scim_errors=False,
    )

    assert isinstance(missing, Error) and missing.status == 404
    assert isinstance(bad_filter, Error) and (bad_filter.status, bad_filter.scim_type) == (
        400,
        "invalidFilter",
    )
