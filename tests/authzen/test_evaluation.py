"""OpenID AuthZEN on Reviewer (docs/authzen.md): the Access Evaluation API answers allow, deny and the
requestable denial for the three policy outcomes; the Access Request and Approval Profile's request,
task status and re-evaluation run on the same proposals; bad input changes nothing."""

import json

import jsonschema
import pytest
import time_machine
from django.core import signing

from approvals.models import Decision, PolicyVersion, Proposal
from approvals.states import State
from audit.models import AuditEvent
from authzen.evaluation import REQUEST_CONTEXT_SALT, REQUESTABLE_SECONDS
from tests import factories
from tests.factories import in_seconds

pytestmark = pytest.mark.django_db

AUTH = {"HTTP_AUTHORIZATION": "Bearer api-secret"}

# The decision shape of AuthZEN 1.0, transcribed from the published JSON Schema
# (openid/authzen, api/schemas/evaluation-response.schema.json): `decision` a required boolean,
# `context` an object. jsonschema (a validator nobody here wrote) checks every answer against it.
DECISION_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["decision"],
    "properties": {"decision": {"type": "boolean"}, "context": {"type": "object"}},
}
EVALUATIONS_SCHEMA = {
    "type": "object",
    "required": ["evaluations"],
    "properties": {"evaluations": {"type": "array", "items": DECISION_SCHEMA}},
}


def refund(amount="40.00", subject="requester", **context) -> dict:
    """A refund as an API gateway would ask about it."""
    return {
        "subject": {"type": "user", "id": subject},
        "action": {"name": "payments.refund", "properties": {"amount": amount, "currency": "EUR"}},
        "resource": {"type": "order", "id": "1182"},
        "context": {"time": "2026-12-07T06:00:00Z", **context},
    }


def post(client, path, body, **headers):
    return client.post(path, data=json.dumps(body), content_type="application/json", **{**AUTH, **headers})


def evaluate(client, body, **headers) -> dict:
    response = post(client, "/access/v1/evaluation", body, **headers)
    assert response.status_code == 200, response.content
    answer = response.json()
    jsonschema.validate(answer, DECISION_SCHEMA)
    return answer


def policy(tenant, outcome, **fields):
    return factories.make_policy(tenant, "refunds", outcome=outcome, tool_pattern="payments.refund", **fields)


@pytest.fixture
def pep(tenant):
    """The gateway in front of the refund API, registered as a pull agent."""
    return factories.make_agent(tenant, "gateway", card_url="")


# --- the three policy outcomes -----------------------------------------------------------------------


def test_an_allowed_action_answers_true_and_releases_exactly_one_execution(client, pep, requester, tenant):
    policy(tenant, PolicyVersion.Outcome.ALLOW)
    answer = evaluate(client, refund())
    assert answer["decision"] is True
    proposal = Proposal.objects.get(pk=answer["context"]["proposal_id"])
    assert proposal.state == State.EXECUTING  # consumed before the answer left
    decision = Decision.objects.get(proposal=proposal)
    assert answer["context"]["decision_token"] == decision.token
    assert answer["context"]["approval"]["id"] == str(decision.jti)
    assert proposal.action == {
        "tool": "payments.refund",
        "target": {"type": "order", "id": "1182"},
        "arguments": {"amount": "40.00", "currency": "EUR"},
    }
    assert proposal.principal_id == "requester"


def test_a_denied_action_answers_false_with_the_signed_rejection(client, pep, requester, tenant):
    policy(tenant, PolicyVersion.Outcome.DENY)
    answer = evaluate(client, refund())
    assert answer["decision"] is False
    assert answer["context"]["reason"] == "denied_by_policy"
    proposal = Proposal.objects.get(pk=answer["context"]["proposal_id"])
    assert proposal.state == State.DENIED
    assert "access_request" not in answer["context"]


def test_an_action_that_needs_people_is_a_requestable_denial_and_stores_nothing(
    client, pep, requester, tenant
):
    policy(tenant, PolicyVersion.Outcome.REQUIRE_APPROVAL)
    events = AuditEvent.objects.count()
    answer = evaluate(client, refund())
    assert answer["decision"] is False
    hint = answer["context"]["access_request"]
    assert hint["requestable"] is True
    assert hint["endpoint"].endswith("/access/v1/requests")
    assert hint["expires_in"] == REQUESTABLE_SECONDS
    assert answer["context"]["evaluation_id"].startswith("eval_")
    assert not Proposal.objects.exists()
    assert AuditEvent.objects.count() == events


# --- the Access Request and Approval Profile ---------------------------------------------------------


def request_access(client, evaluation_body: dict, denial_answer: dict, **extra):
    body = {
        **evaluation_body,
        "context": {"business_justification": "customer called twice"},
        "denial": {
            "evaluation_id": denial_answer["context"]["evaluation_id"],
            "decision": {"decision": False, "context": {"reason": "approval_required"}},
            "access_request": denial_answer["context"]["access_request"],
        },
        **extra,
    }
    return post(client, "/access/v1/requests", body)


@pytest.fixture
def needs_people(tenant):
    return policy(
        tenant, PolicyVersion.Outcome.REQUIRE_APPROVAL, thresholds=[{"group": "finance", "count": 1}]
    )


def test_the_access_request_is_a_proposal_people_approve_and_reevaluation_answers_true_once(
    client, pep, requester, reviewer_a, needs_people
):
    denial = evaluate(client, refund())
    submitted = request_access(client, refund(), denial)
    assert submitted.status_code == 202, submitted.content
    task = submitted.json()["task"]
    assert task["status"] == "pending"
    assert submitted["Location"] == task["status_endpoint"]
    proposal = Proposal.objects.get(pk=task["id"])
    assert proposal.state == State.AWAITING_REVIEW
    assert proposal.evidence[0]["excerpt"] == "customer called twice"

    # The same denial submitted again is the same task.
    again = request_access(client, refund(), denial)
    assert again.json()["task"]["id"] == task["id"]
    assert Proposal.objects.count() == 1

    pending = client.get(f"/access/v1/requests/{task['id']}", **AUTH)
    assert pending.json()["task"]["status"] == "pending"
    assert "result" not in pending.json()

    factories.vote(proposal, reviewer_a)
    done = client.get(f"/access/v1/requests/{task['id']}", **AUTH).json()
    assert done["task"]["status"] == "approved"
    result = done["result"]
    assert result["mode"] == "reevaluate"
    decision = Decision.objects.get(proposal=proposal)
    assert result["approval"]["id"] == str(decision.jti)

    reevaluation = refund(authzen_access_request_approval=result["approval_context"])
    released = evaluate(client, reevaluation)
    assert released["decision"] is True
    assert released["context"]["decision_token"] == decision.token
    proposal.refresh_from_db()
    assert proposal.state == State.EXECUTING

    twice = evaluate(client, reevaluation)
    assert twice["decision"] is False
    assert twice["context"]["reason"] == "approval_consumed"


def test_an_approval_never_answers_for_another_request(client, pep, requester, reviewer_a, needs_people):
    denial = evaluate(client, refund())
    task = request_access(client, refund(), denial).json()["task"]
    proposal = Proposal.objects.get(pk=task["id"])
    factories.vote(proposal, reviewer_a)
    approval = client.get(f"/access/v1/requests/{task['id']}", **AUTH).json()["result"]["approval_context"]

    bigger = evaluate(client, refund(amount="400.00", authzen_access_request_approval=approval))
    assert bigger["decision"] is False
    assert bigger["context"]["reason"] == "approval_for_another_request"
    unknown = evaluate(client, refund(authzen_access_request_approval={"approval_id": "not-an-approval"}))
    assert unknown["context"]["reason"] == "unknown_approval"
    proposal.refresh_from_db()
    assert proposal.state == State.APPROVED  # still there for the request it was made for


def test_a_rejection_is_a_denied_task(client, pep, requester, reviewer_a, needs_people):
    denial = evaluate(client, refund())
    task = request_access(client, refund(), denial).json()["task"]
    factories.vote(Proposal.objects.get(pk=task["id"]), reviewer_a, verdict="reject", reason="no")
    answer = client.get(f"/access/v1/requests/{task['id']}", **AUTH).json()
    assert answer["task"]["status"] == "denied"
    assert "result" not in answer


def problem_of(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["type"] == f"urn:openid:authzen:access-request:error:{code}"
    assert body["status"] == status
    return body


def test_a_request_that_does_not_match_its_denial_is_refused_and_changes_nothing(
    client, pep, requester, needs_people
):
    denial = evaluate(client, refund())
    problem_of(request_access(client, refund(amount="400.00"), denial), 400, "invalid_denial_binding")
    forged = json.loads(json.dumps(denial))
    forged["context"]["access_request"]["request_context"] += "x"
    problem_of(request_access(client, refund(), forged), 400, "invalid_denial_binding")
    not_requestable = json.loads(json.dumps(denial))
    not_requestable["context"]["access_request"]["requestable"] = False
    problem_of(request_access(client, refund(), not_requestable), 400, "not_requestable")
    other_id = request_access(
        client,
        refund(),
        denial,
        denial={
            "evaluation_id": "eval_other",
            "decision": {"decision": False},
            "access_request": denial["context"]["access_request"],
        },
    )
    problem_of(other_id, 400, "invalid_denial_binding")
    assert not Proposal.objects.exists()


def test_a_denial_from_another_pep_does_not_bind(client, pep, requester, tenant, needs_people):
    factories.make_agent(tenant, "other-gateway", card_url="", api_token="other-secret")
    denial = post(client, "/access/v1/evaluation", refund(), HTTP_AUTHORIZATION="Bearer other-secret").json()
    problem_of(request_access(client, refund(), denial), 400, "invalid_denial_binding")
    assert not Proposal.objects.exists()


def test_an_expired_denial_is_gone(client, pep, requester, needs_people):
    denial = evaluate(client, refund())
    with time_machine.travel(in_seconds(REQUESTABLE_SECONDS + 5)):
        problem_of(request_access(client, refund(), denial), 410, "expired_denial")
    assert not Proposal.objects.exists()


def test_another_peps_task_is_unknown(client, pep, requester, tenant, needs_people):
    denial = evaluate(client, refund())
    task = request_access(client, refund(), denial).json()["task"]
    factories.make_agent(tenant, "other-gateway", card_url="", api_token="other-secret")
    response = client.get(f"/access/v1/requests/{task['id']}", HTTP_AUTHORIZATION="Bearer other-secret")
    problem_of(response, 404, "unknown_task")
    problem_of(client.get("/access/v1/requests/not-a-task", **AUTH), 404, "unknown_task")


def test_bundled_items_are_refused(client, pep, requester, needs_people):
    denial = evaluate(client, refund())
    response = request_access(client, refund(), denial, items=[])
    assert response.status_code == 400
    assert response.json()["error"]["field"] == "items"
    assert not Proposal.objects.exists()


# --- subjects, authentication, bad input ------------------------------------------------------------


def test_another_tenants_subject_or_an_unknown_one_is_forbidden_and_changes_nothing(
    client, pep, requester, outsider, other_tenant, tenant
):
    policy(tenant, PolicyVersion.Outcome.ALLOW)
    membership = outsider.tenant_memberships.get()
    membership.principal_id = "outsider"
    membership.save(update_fields=["principal_id"])
    events = AuditEvent.objects.count()
    for subject in ("outsider", "nobody"):
        response = post(client, "/access/v1/evaluation", refund(subject=subject))
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "unknown_subject"
    assert not Proposal.objects.exists()
    assert AuditEvent.objects.count() == events


def test_without_the_peps_token_the_answer_is_401_with_the_scheme(client, pep):
    for headers in ({}, {"HTTP_AUTHORIZATION": "Bearer wrong"}):
        response = client.post(
            "/access/v1/evaluation", data=json.dumps(refund()), content_type="application/json", **headers
        )
        assert response.status_code == 401
        assert response["WWW-Authenticate"].startswith("Bearer realm=")
    assert client.get("/access/v1/requests/x").status_code == 401


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": {"name": "x"}, "resource": {"type": "a", "id": "b"}}, "subject"),
        ({**refund(), "action": {"properties": {}}}, "action.name"),
        ({**refund(), "resource": {"type": "order"}}, "resource.id"),
        (
            {**refund(), "action": {"name": "payments.refund", "properties": {"amount": 40}}},
            "action.properties.amount",
        ),
    ],
)
def test_a_malformed_evaluation_is_400_and_changes_nothing(client, pep, requester, body, field):
    response = post(client, "/access/v1/evaluation", body)
    assert response.status_code == 400
    assert response.json()["error"]["field"] == field
    assert not Proposal.objects.exists()


def test_unknown_members_are_ignored_and_the_request_id_comes_back(client, pep, requester, tenant):
    policy(tenant, PolicyVersion.Outcome.DENY)
    body = {**refund(), "future_member": {"x": "y"}}
    response = post(client, "/access/v1/evaluation", body, HTTP_X_REQUEST_ID="bfe9eb29")
    assert response.status_code == 200
    assert response["X-Request-ID"] == "bfe9eb29"


def test_the_endpoints_refuse_the_wrong_method(client, pep):
    assert client.get("/access/v1/evaluation", **AUTH).status_code == 405
    assert client.get("/access/v1/evaluations", **AUTH).status_code == 405
    assert client.post("/access/v1/requests/x", **AUTH).status_code == 405


# --- the batch ----------------------------------------------------------------------------------------


def test_evaluations_answer_in_order_with_defaults_and_errors_per_item(client, pep, requester, tenant):
    policy(tenant, PolicyVersion.Outcome.ALLOW)
    body = {
        "subject": {"type": "user", "id": "requester"},
        "action": {"name": "payments.refund", "properties": {"amount": "10.00"}},
        "evaluations": [
            {"resource": {"type": "order", "id": "1"}},
            {"resource": {"type": "order", "id": "2"}, "subject": {"type": "user", "id": "nobody"}},
            {"resource": {"type": "order", "id": "3"}},
        ],
    }
    response = post(client, "/access/v1/evaluations", body)
    answer = response.json()
    jsonschema.validate(answer, EVALUATIONS_SCHEMA)
    assert [item["decision"] for item in answer["evaluations"]] == [True, False, True]
    assert answer["evaluations"][1]["context"]["error"]["status"] == 403
    assert Proposal.objects.count() == 2


def test_deny_on_first_deny_stops_at_the_first_false(client, pep, requester, tenant):
    policy(tenant, PolicyVersion.Outcome.ALLOW, condition='args.amount != "99.00"')
    factories.make_policy(
        tenant,
        "big",
        outcome=PolicyVersion.Outcome.DENY,
        tool_pattern="payments.refund",
        condition='args.amount == "99.00"',
    )
    body = {
        "subject": {"type": "user", "id": "requester"},
        "resource": {"type": "order", "id": "1"},
        "evaluations": [
            {"action": {"name": "payments.refund", "properties": {"amount": "99.00"}}},
            {"action": {"name": "payments.refund", "properties": {"amount": "1.00"}}},
        ],
        "options": {"evaluations_semantic": "deny_on_first_deny"},
    }
    answer = post(client, "/access/v1/evaluations", body).json()
    assert [item["decision"] for item in answer["evaluations"]] == [False]
    assert Proposal.objects.count() == 1


def test_evaluations_without_an_array_is_one_evaluation(client, pep, requester, tenant):
    policy(tenant, PolicyVersion.Outcome.DENY)
    answer = post(client, "/access/v1/evaluations", refund()).json()
    jsonschema.validate(answer, DECISION_SCHEMA)
    assert answer["decision"] is False


def test_the_pdp_metadata_names_the_endpoints(client, settings):
    answer = client.get("/.well-known/authzen-configuration").json()
    assert answer["policy_decision_point"] == settings.REVIEWER_ISSUER
    assert answer["access_evaluation_endpoint"] == f"{settings.REVIEWER_ISSUER}/access/v1/evaluation"
    assert answer["access_request_endpoint"] == f"{settings.REVIEWER_ISSUER}/access/v1/requests"
    assert "urn:openid:authzen:capability:access-request" in answer["capabilities"]


def test_the_request_context_is_reviewers_signature(client, pep, requester, needs_people):
    denial = evaluate(client, refund())
    bound = signing.loads(denial["context"]["access_request"]["request_context"], salt=REQUEST_CONTEXT_SALT)
    assert bound["e"] == denial["context"]["evaluation_id"]
    assert bound["p"] == "requester"
