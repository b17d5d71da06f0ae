"""SCIM bodies and URLs a provisioning client should never send, sent as raw HTTP: each is refused with
RFC 7644's error body (section 3.12, `status` a string), changes nothing, and never answers 500."""

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from sso.models import IdentityProvider, ScimUser
from sso.scim.auth import issue_token

pytestmark = pytest.mark.django_db

USER_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:User"


ERROR_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:Error"
PATCH_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
GROUP_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:Group"


@pytest.fixture
def token(tenant):
    provider = IdentityProvider.objects.create(
        tenant=tenant, display_name="Acme IdP", issuer="https://idp.acme.example", client_id="reviewer"
    )
    return issue_token(provider)


def send(token, method, path, body: str | bytes | None = None):
    """As the provisioning service would, through CSRF checks as for any client without a session."""
    return getattr(Client(enforce_csrf_checks=True), method)(
        f"/scim/v2/{path}",
        data=body,
        content_type="application/scim+json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def scim_error(answer, status: int, scim_type: str | None = None) -> str:
    """The answer is SCIM's error body with this status, as a string; returns its detail."""
    assert answer.status_code == status, answer.content[:300]
    body = answer.json()
    assert body["schemas"] == [ERROR_SCHEMA]
    assert body["status"] == str(status)
    assert body.get("scimType") == scim_type
    assert isinstance(body["detail"], str) and body["detail"]
    return body["detail"]


def person(**fields) -> str:
    return json.dumps({"schemas": [USER_SCHEMA], "userName": "quinn@acme.example", **fields})


def nested(depth: int) -> str:
    name = '{"a": ' * depth + "1" + "}" * depth
    return f'{{"schemas": ["{USER_SCHEMA}"], "userName": "deep", "name": {name}}}'


@pytest.mark.parametrize("depth", [40, 3000])
@pytest.mark.parametrize("method, path", [("post", "Users"), ("put", "Users/{id}"), ("patch", "Users/{id}")])
def test_a_body_nested_deeper_than_the_cap_is_refused(token, depth, method, path):
    created = send(token, "post", "Users", person())
    target = path.format(id=created.json()["id"])

    detail = scim_error(send(token, method, target, nested(depth)), 400, "invalidSyntax")

    assert "nested" in detail
    assert ScimUser.objects.get().user_name == "quinn@acme.example"


def test_a_body_nested_within_the_cap_is_read(token):
    assert send(token, "post", "Users", nested(20)).status_code == 201


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"name": {"givenName": "Q" * 1001}}, "at most 1000 characters"),
        ({"name": {"familyName": "Q" * 2_000_000}}, "larger than"),
        ({"emails": [{"value": "q" * 245 + "@acme.example", "primary": True}]}, "at most 254 characters"),
        ({"emails": [{"value": "quinn@acme.example"}, {"value": "q" * 245 + "@acme.example"}]}, "254"),
        ({"externalId": "x" * 1001}, "at most 1000 characters"),
        ({"nickName": "x" * 5000}, "at most 1000 characters"),
    ],
)
def test_an_oversized_field_or_body_is_refused(token, fields, words):
    answer = send(token, "post", "Users", person(**fields))

    status = 413 if words == "larger than" else 400
    assert words in scim_error(answer, status, None if status == 413 else "invalidValue")
    assert not ScimUser.objects.exists()
    assert not get_user_model().objects.filter(username__startswith="quinn").exists()


def test_a_name_at_the_cap_is_kept(token):
    answer = send(token, "post", "Users", person(name={"givenName": "Q" * 1000}))

    assert answer.status_code == 201, answer.content[:300]


def test_a_group_name_longer_than_its_column_is_refused(token):
    answer = send(token, "post", "Groups", json.dumps({"schemas": [GROUP_SCHEMA], "displayName": "G" * 201}))

    assert "at most 200 characters" in scim_error(answer, 400, "invalidValue")


def test_removing_a_member_that_is_not_a_uuid_removes_no_one(token):
    group = send(token, "post", "Groups", json.dumps({"schemas": [GROUP_SCHEMA], "displayName": "Payments"}))
    operations = [{"op": "remove", "path": "members", "value": [{"value": "not-a-uuid"}]}]

    answer = send(
        token,
        "patch",
        f"Groups/{group.json()['id']}",
        json.dumps({"schemas": [PATCH_SCHEMA], "Operations": operations}),
    )

    assert answer.status_code in (200, 204), answer.content[:300]


@pytest.mark.parametrize("method", ["get", "put", "patch", "delete"])
@pytest.mark.parametrize("kind", ["Users", "Groups"])
def test_an_id_that_is_not_a_uuid_names_nothing(token, method, kind):
    body = {
        "put": person() if kind == "Users" else json.dumps({"schemas": [GROUP_SCHEMA], "displayName": "g"}),
        "patch": json.dumps({"schemas": [PATCH_SCHEMA], "Operations": [{"op": "replace", "value": {}}]}),
    }.get(method)

    detail = scim_error(send(token, method, f"{kind}/not-a-uuid", body), 404)

    assert "not-a-uuid" in detail


def test_a_member_that_is_not_a_uuid_is_refused(token):
    group = send(token, "post", "Groups", json.dumps({"schemas": [GROUP_SCHEMA], "displayName": "Payments"}))
    operations = [{"op": "add", "path": "members", "value": [{"value": "not-a-uuid"}]}]

    answer = send(
        token,
        "patch",
        f"Groups/{group.json()['id']}",
        json.dumps({"schemas": [PATCH_SCHEMA], "Operations": operations}),
    )

    assert "not-a-uuid" in scim_error(answer, 400, "invalidValue")


@pytest.mark.parametrize("query", ['userName eq "unclosed', "userName zz 1", "(((("])
def test_a_bad_filter_is_an_invalid_filter(token, query):
    scim_error(
        Client().get("/scim/v2/Users", {"filter": query}, HTTP_AUTHORIZATION=f"Bearer {token}"),
        400,
        "invalidFilter",
    )


def test_a_search_with_a_bad_filter_is_an_invalid_filter(token):
    search = {"schemas": ["urn:ietf:params:scim:api:messages:2.0:SearchRequest"], "filter": "userName zz"}

    scim_error(send(token, "post", "Users/.search", json.dumps(search)), 400, "invalidFilter")


@pytest.mark.parametrize(
    "method, path, body, status, scim_type",
    [
        ("get", "Users/6f1c9e64-1b0e-4c53-9d2a-3f8f5a2b7c10", None, 404, None),
        ("post", "Users", "{not json", 400, "invalidSyntax"),
        ("post", "Users", json.dumps([1, 2]), 400, "invalidSyntax"),
        ("post", "Users", person(active="maybe"), 400, "invalidValue"),
        ("get", "Users?startIndex=0", None, 400, None),
        ("get", "Nowhere", None, 404, None),
        ("post", "Bulk", "{}", 501, None),
    ],
)
def test_every_error_gives_its_status_as_a_string(token, method, path, body, status, scim_type):
    scim_error(send(token, method, path, body), status, scim_type)


def test_a_conflict_gives_its_status_as_a_string(token):
    assert send(token, "post", "Users", person()).status_code == 201

    scim_error(send(token, "post", "Users", person()), 409, "uniqueness")


def test_a_missing_token_gives_its_status_as_a_string():
    scim_error(Client().get("/scim/v2/Users"), 401)


# --- an id in a filter: a string to the client, whatever the column --------------------------------


def search(token, kind: str, query: str):
    return Client().get(f"/scim/v2/{kind}", {"filter": query}, HTTP_AUTHORIZATION=f"Bearer {token}")


@pytest.mark.parametrize("kind", ["Users", "Groups"])
@pytest.mark.parametrize(
    "query",
    [
        'id eq "not-a-uuid"',
        'id eq ""',
        'id co "zz"',
        'id sw "not"',
        'id gt "x"',
        'not (id eq "1") and id eq "2"',
    ],
)
def test_a_filter_on_an_id_that_is_not_a_uuid_matches_nothing(token, kind, query):
    """RFC 7643 3.1: an id is a string to the client; one that names no resource is an empty list. On
    PostgreSQL (the suite's PostgreSQL pass) the id column is a uuid, which refused such a text: 500."""
    if kind == "Users":
        send(token, "post", "Users", person())
    else:
        send(token, "post", "Groups", json.dumps({"schemas": [GROUP_SCHEMA], "displayName": "Payments"}))

    answer = search(token, kind, query)

    assert answer.status_code == 200, answer.content[:300]
    assert (answer.json()["totalResults"], answer.json().get("Resources", [])) == (0, [])


@pytest.mark.parametrize("kind", ["Users", "Groups"])
def test_a_filter_on_an_id_finds_the_resource_by_the_id_scim_gave_it(token, kind):
    if kind == "Users":
        created = send(token, "post", "Users", person()).json()
        send(token, "post", "Users", person(userName="other@acme.example"))
    else:
        created = send(
            token, "post", "Groups", json.dumps({"schemas": [GROUP_SCHEMA], "displayName": "A"})
        ).json()
        send(token, "post", "Groups", json.dumps({"schemas": [GROUP_SCHEMA], "displayName": "B"}))
    ident = created["id"]

    for query in (f'id eq "{ident}"', f'id sw "{ident[:13]}"', f'id co "{ident[9:18]}"'):
        found = search(token, kind, query).json()
        assert [r["id"] for r in found["Resources"]] == [ident], query


def test_scim2_client_reads_a_filter_on_a_malformed_id_as_an_empty_list(token):
    """What a provisioning client nobody here wrote makes of it: a ListResponse with no resource."""
    from scim2_models import ListResponse, SearchRequest

    from tests.sso.scim import scim_client

    scim = scim_client(token)
    send(token, "post", "Users", person())
    user = scim.get_resource_model("User")

    # scim2-models parses the filter string (its stubs name only the parsed type)
    search: SearchRequest = SearchRequest(filter='id eq "not-a-uuid"')  # type: ignore[arg-type]
    answer = scim.query(user, query_parameters=search)

    assert isinstance(answer, ListResponse) and answer.total_results == 0 and not answer.resources
