"""Agent input that used to crash intake with a 500 and numbers where DESIGN says
strings, sent over HTTP through Django's test client on both intake paths.

Each hostile value gets a 400 whose `field` names it, an `intake.refused` audit event, and writes no
proposal. The rule for numbers is one for both paths: a JSON number anywhere in `action.arguments` is
refused (DESIGN.md "Binding": amounts are strings), where the push path used to turn 2**60 into a
double (digest_mismatch) and the REST path into `bad_action`.
"""

import json

import pytest
from a2a.types import TaskState

from approvals.a2a.push import EXTENSION_URI
from approvals.canonical import action_digest
from approvals.models import Proposal
from audit.models import AuditEvent, Verb
from tests.approvals.test_api import AUTH, submission
from tests.approvals.test_push import TOKEN, URL, status_push
from tests.factories import approval_request, refund_action

pytestmark = pytest.mark.django_db

MARK = "__hostile__"
DEEP = 1000


def raw(body: dict, literal: str) -> str:
    """The JSON text of `body` with the string MARK replaced by a raw literal (NaN is not a string)."""
    text = json.dumps(body)
    assert text.count(json.dumps(MARK)) == 1
    return text.replace(json.dumps(MARK), literal)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# (where in the request the value goes, the raw JSON literal, expected code, expected field suffix)
HOSTILE = [
    ("consequences.amount", "NaN", "bad_number", "request.consequences.amount"),
    ("consequences.amount", "Infinity", "bad_number", "request.consequences.amount"),
    ("consequences.amount", "-Infinity", "bad_number", "request.consequences.amount"),
    ("consequences.amount", str(2**70), "bad_number", "request.consequences.amount"),
    ("consequences.amount", "1e21", "bad_number", "request.consequences.amount"),
    ("summary", json.dumps("Refund\u0000 EUR 40"), "nul_character", "request.summary"),
    ("principal.display", json.dumps("Ann\u0000"), "nul_character", "request.principal.display"),
    ("consequences.tree", nested(DEEP), "too_deep", None),
    ("action.arguments.amount", "40", "invalid", "request.action.arguments.amount"),
    ("action.arguments.amount", "40.1", "invalid", "request.action.arguments.amount"),
    ("action.arguments.amount", "1e21", "bad_number", "request.action.arguments.amount"),
    ("action.arguments.amount", str(2**60), "bad_number", "request.action.arguments.amount"),
]


HOSTILE_IDS = [
    f"{where}={literal if len(literal) < 24 else f'depth-{DEEP}'}" for where, literal, *_ in HOSTILE
]


def hostile_request(where: str) -> dict:
    """An approval request with MARK at `where` (dotted), its digest computed over the marked action so
    the digest is not what gets it refused."""
    action = refund_action()
    request = approval_request(action=action)
    *parents, last = where.split(".")
    node = request
    for part in parents:
        node = node[part]
    node[last] = MARK
    request["action_digest"] = action_digest(request["action"])
    return request


def assert_refused_and_audited(response, code: str, field: str | None, *, via: str):
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == code, error
    if field is not None:
        assert error["field"].endswith(field), error
        assert field.split(".")[-1] in error["message"]
    assert Proposal.objects.count() == 0
    refusal = AuditEvent.objects.get(verb=Verb.INTAKE_REFUSED)
    assert (refusal.data["via"], refusal.data["code"], refusal.data["field"]) == (via, code, error["field"])


@pytest.mark.parametrize(("where", "literal", "code", "field"), HOSTILE, ids=HOSTILE_IDS)
def test_the_api_refuses_hostile_values_with_the_field_and_writes_nothing(
    client, agent, refund_policy, where, literal, code, field
):
    body = {"task_id": "task-1", "context_id": "ctx-1", "request": hostile_request(where)}

    response = client.post(
        "/api/v1/proposals", data=raw(body, literal), content_type="application/json", **AUTH
    )

    assert_refused_and_audited(response, code, field, via="api")


@pytest.mark.parametrize(("where", "literal", "code", "field"), HOSTILE, ids=HOSTILE_IDS)
def test_a_push_with_hostile_values_is_refused_the_same_way(
    client, agent, refund_policy, where, literal, code, field
):
    body = status_push(TaskState.TASK_STATE_AUTH_REQUIRED, request=hostile_request(where))

    response = client.post(URL, data=raw(body, literal), content_type="application/json", **TOKEN)

    assert_refused_and_audited(response, code, field, via="push")


@pytest.mark.parametrize(
    "literal",
    ["NaN", "Infinity", nested(DEEP), nested(40)],
    ids=["NaN", "Infinity", "depth-1000", "depth-40"],
)
def test_hostile_values_in_push_metadata_outside_the_request_are_refused(
    client, agent, refund_policy, literal
):
    body = status_push(TaskState.TASK_STATE_AUTH_REQUIRED, request=approval_request())
    body["statusUpdate"]["status"]["message"]["metadata"]["x-vendor"] = {"score": MARK}

    response = client.post(URL, data=raw(body, literal), content_type="application/json", **TOKEN)

    code = "bad_number" if literal in ("NaN", "Infinity") else "too_deep"
    assert_refused_and_audited(response, code, None, via="push")
    if code == "bad_number":
        assert response.json()["error"]["field"] == "statusUpdate.status.message.metadata.x-vendor.score"


def test_numbers_outside_the_arguments_and_strings_inside_are_accepted(client, agent, refund_policy):
    data = submission()
    data["request"]["consequences"]["items"] = 3  # consequences are description, not the action
    assert isinstance(data["request"]["action"]["arguments"]["amount"], str)

    response = client.post(
        "/api/v1/proposals", data=json.dumps(data), content_type="application/json", **AUTH
    )

    assert response.status_code == 201, response.content
    assert not AuditEvent.objects.filter(verb=Verb.INTAKE_REFUSED).exists()


def test_the_extension_key_is_where_the_push_path_names_the_field(client, agent, refund_policy):
    # The push path's field names the value inside the StreamResponse the agent sent.
    body = status_push(TaskState.TASK_STATE_AUTH_REQUIRED, request=hostile_request("consequences.amount"))

    response = client.post(URL, data=raw(body, "NaN"), content_type="application/json", **TOKEN)

    assert response.json()["error"]["field"] == (
        f"statusUpdate.status.message.metadata.{EXTENSION_URI}.request.consequences.amount"
    )
