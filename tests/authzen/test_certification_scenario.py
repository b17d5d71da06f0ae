"""The OpenID AuthZEN 1.0 certification scenario's Basic Core and Batch Core cases, run against Reviewer.

The requests and expected answers are transcribed from the AuthZEN working group's certification
scenario (openid/authzen, certification/authorization-api-1_0-scenario.md, sections "Required Fixture",
"Basic Certification" c-2 and "Batch Certification" c-3; its harness is not published with it). The
fixture (subjects alice and bob, records, read and write) is loaded as Reviewer members and policies.
The Properties levels are not claimed: Reviewer's policy sees action.properties but not subject or
resource properties (docs/authzen.md).
"""

import json

import jsonschema
import pytest

from approvals.models import PolicyVersion
from tests import factories
from tests.authzen.test_evaluation import DECISION_SCHEMA, EVALUATIONS_SCHEMA

pytestmark = pytest.mark.django_db

AUTH = {"HTTP_AUTHORIZATION": "Bearer api-secret"}
ALICE = {"type": "user", "id": "alice"}
BOB = {"type": "user", "id": "bob"}
RECORD_1 = {"type": "record", "id": "record-1"}


@pytest.fixture(autouse=True)
def fixture_policy(tenant):
    """c-1: alice reads and writes record-1, bob reads it and may not write it."""
    factories.make_user("alice", tenant=tenant, principal_id="alice")
    factories.make_user("bob", tenant=tenant, principal_id="bob")
    factories.make_agent(tenant, "pep", card_url="")
    allow, deny = PolicyVersion.Outcome.ALLOW, PolicyVersion.Outcome.DENY
    factories.make_policy(tenant, "read", outcome=allow, tool_pattern="read")
    factories.make_policy(
        tenant, "write", outcome=allow, tool_pattern="write", condition='principal.id != "bob"'
    )
    factories.make_policy(
        tenant, "bob-no-write", outcome=deny, tool_pattern="write", condition='principal.id == "bob"'
    )


def call(client, path, body, **headers):
    data = body if isinstance(body, str) else json.dumps(body)
    return client.post(
        path, data=data, content_type=headers.pop("content_type", "application/json"), **AUTH, **headers
    )


def decision(client, body) -> bool:
    response = call(client, "/access/v1/evaluation", body)
    assert response.status_code == 200, response.content
    answer = response.json()
    jsonschema.validate(answer, DECISION_SCHEMA)  # c-2-3: decision a boolean, context an object
    return answer["decision"]


def test_c_2_2_fixture_requests(client):
    assert decision(client, {"subject": ALICE, "action": {"name": "read"}, "resource": RECORD_1}) is True
    assert decision(client, {"subject": BOB, "action": {"name": "write"}, "resource": RECORD_1}) is False
    with_context = {"time": "2025-06-27T18:03-07:00", "ip": "192.168.1.1"}
    assert decision(
        client, {"subject": ALICE, "action": {"name": "read"}, "resource": RECORD_1, "context": with_context}
    )
    more_properties = {
        "subject": {**ALICE, "properties": {"department": "Sales", "role": "manager"}},
        "action": {"name": "read", "properties": {"method": "GET"}},
        "resource": {**RECORD_1, "properties": {"status": "active", "owner": "bob"}},
    }
    assert decision(client, more_properties) is True
    unknown = {
        "subject": ALICE,
        "action": {"name": "read"},
        "resource": RECORD_1,
        "foo": "bar",
        "futureField": {"nested": True},
    }
    assert decision(client, unknown) is True


@pytest.mark.parametrize(
    "body",
    [
        {"action": {"name": "read"}, "resource": RECORD_1},
        {"subject": ALICE, "resource": RECORD_1},
        {"subject": ALICE, "action": {"name": "read"}},
        {"subject": {"id": "alice"}, "action": {"name": "read"}, "resource": RECORD_1},
        {"subject": {"type": "user"}, "action": {"name": "read"}, "resource": RECORD_1},
        {"subject": ALICE, "action": {}, "resource": RECORD_1},
        {"subject": ALICE, "action": {"name": "read"}, "resource": {"id": "record-1"}},
        {"subject": ALICE, "action": {"name": "read"}, "resource": {"type": "record"}},
        {"subject": "alice", "action": {"name": "read"}, "resource": RECORD_1},
        {"subject": ALICE, "action": {"name": 123}, "resource": RECORD_1},
        "{not json",
        "",
    ],
)
def test_c_2_4_a_bad_request_is_400(client, body):
    assert call(client, "/access/v1/evaluation", body).status_code == 400


def test_c_2_4_3_another_content_type_is_400(client):
    body = json.dumps({"subject": ALICE, "action": {"name": "read"}, "resource": RECORD_1})
    assert call(client, "/access/v1/evaluation", body, content_type="text/plain").status_code == 400


def test_c_2_5_and_c_2_6_the_request_id_comes_back_and_the_decision_does_not_change(client):
    body = {"subject": ALICE, "action": {"name": "read"}, "resource": RECORD_1}
    assert call(client, "/access/v1/evaluation", body, HTTP_X_REQUEST_ID="r-1")["X-Request-ID"] == "r-1"
    assert "X-Request-ID" not in call(client, "/access/v1/evaluation", body)
    assert [decision(client, body) for _ in range(3)] == [True, True, True]


def batch(client, body) -> list[bool]:
    response = call(client, "/access/v1/evaluations", body)
    assert response.status_code == 200, response.content
    answer = response.json()
    jsonschema.validate(answer, EVALUATIONS_SCHEMA)
    assert "decision" not in answer  # c-3-3-4: omitted beside an evaluations array
    return [item["decision"] for item in answer["evaluations"]]


def test_c_3_2_batches(client):
    defaults = {"subject": ALICE, "action": {"name": "read"}}
    assert (
        len(
            batch(
                client,
                {
                    **defaults,
                    "evaluations": [
                        {"resource": RECORD_1},
                        {"resource": {"type": "record", "id": "record-2"}},
                    ],
                },
            )
        )
        == 2
    )
    by_action = {
        "subject": BOB,
        "resource": RECORD_1,
        "evaluations": [{"action": {"name": "read"}}, {"action": {"name": "write"}}],
    }
    assert batch(client, by_action) == [True, False]
    spelled_out = {
        "evaluations": [
            {"subject": ALICE, "action": {"name": "read"}, "resource": RECORD_1},
            {"subject": BOB, "action": {"name": "write"}, "resource": RECORD_1},
        ]
    }
    assert batch(client, spelled_out) == [True, False]
    with_context = {
        **defaults,
        "context": {"time": "2025-06-27T18:03-07:00"},
        "evaluations": [
            {"resource": RECORD_1},
            {
                "resource": {"type": "record", "id": "record-2"},
                "context": {"time": "2025-06-27T19:00-07:00", "source": "batch-override"},
            },
        ],
    }
    assert len(batch(client, with_context)) == 2


def test_c_3_4_a_failed_item_is_false_in_its_place(client):
    body: dict[str, object] = {
        **{"subject": ALICE, "action": {"name": "read"}},
        "options": {"evaluations_semantic": "execute_all"},
        "evaluations": [{"resource": RECORD_1}, {}],
    }
    assert batch(client, body) == [True, False]
    single: dict[str, object] = {"subject": ALICE, "action": {"name": "read"}, "resource": RECORD_1}
    for one in (single, {**single, "evaluations": []}):
        response = call(client, "/access/v1/evaluations", one)
        assert response.json()["decision"] is True
