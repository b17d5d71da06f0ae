"""The agent-facing REST API, /api/v1/: each endpoint works, refuses the wrong method, the wrong token
and other agents' data, and answers every error in the one shape {"error": {"code", "message", "field"}}."""

import json
import uuid

import pytest

from accounts.stepup import step_up_for
from approvals.models import Decision, Proposal
from approvals.services.decisions import revoke_decision
from approvals.services.halts import halt
from approvals.services.votes import cast_vote
from approvals.states import State
from audit.models import AuditEvent, Verb
from tests import factories
from tests.factories import approval_request, totp_code

pytestmark = pytest.mark.django_db

AUTH = {"HTTP_AUTHORIZATION": "Bearer api-secret"}


def post(client, url, body, **headers):
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(url, data=data, content_type="application/json", **{**AUTH, **headers})


def submission(**request_kwargs) -> dict:
    return {
        "task_id": f"task-{uuid.uuid4()}",
        "context_id": "ctx-1",
        "request": approval_request(**request_kwargs),
    }


def error_of(response) -> dict:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "field"}, body
    return body["error"]


@pytest.fixture
def approved(agent, refund_policy, requester, reviewer_a):
    """A proposal approved by one finance reviewer, and its decision."""
    proposal = factories.submit(agent)
    cast_vote(
        proposal.id,
        reviewer_a,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
    )
    return Proposal.objects.get(pk=proposal.pk), Decision.objects.get(proposal=proposal)


# --- POST /api/v1/proposals ------------------------------------------------------------------------


def test_submitting_a_request_creates_a_proposal(client, agent, refund_policy):
    body = submission()

    response = post(client, "/api/v1/proposals", body)

    assert response.status_code == 201
    proposal = Proposal.objects.get(agent=agent, task_id=body["task_id"])
    assert response.json() == {
        "proposal_id": str(proposal.id),
        "state": State.AWAITING_REVIEW,
        "status_url": f"http://127.0.0.1:8000/api/v1/proposals/{proposal.id}",
        "token": None,  # people decide: no decision yet
    }
    assert AuditEvent.objects.filter(verb=Verb.PROPOSAL_SUBMITTED, data__via="api").count() == 1


def test_submitting_the_same_request_again_answers_200_with_the_same_proposal(client, agent, refund_policy):
    body = submission()
    first = post(client, "/api/v1/proposals", body)

    again = post(client, "/api/v1/proposals", body)

    assert again.status_code == 200
    assert again.json() == first.json()
    assert Proposal.objects.count() == 1


def test_submitting_needs_the_agents_api_token(client, agent, refund_policy):
    for headers in (
        {},
        {"HTTP_AUTHORIZATION": "Bearer wrong"},
        {"HTTP_AUTHORIZATION": "Basic api-secret"},
        {"HTTP_AUTHORIZATION": "Bearer"},
    ):
        response = client.post(
            "/api/v1/proposals", data=json.dumps(submission()), content_type="application/json", **headers
        )
        assert response.status_code == 401, headers
        assert error_of(response)["code"] == "unauthorized"
    assert Proposal.objects.count() == 0


def test_the_push_token_is_not_an_api_token(client, agent):
    response = post(client, "/api/v1/proposals", submission(), HTTP_AUTHORIZATION="Bearer push-secret")

    assert response.status_code == 401


def test_proposals_refuses_get(client, agent):
    assert client.get("/api/v1/proposals", **AUTH).status_code == 405


def test_a_malformed_request_is_a_400_naming_the_field(client, agent):
    body = submission()
    del body["request"]["summary"]

    response = post(client, "/api/v1/proposals", body)

    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid"
    assert error["field"] == "request.summary"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda body: body["request"]["principal"].pop("id"), "request.principal.id"),
        (lambda body: body["request"].update(action_digest="md5:abc"), "request.action_digest"),
        (
            lambda body: body["request"]["evidence"][0].update(url="javascript:alert(1)"),
            "request.evidence.0.url",
        ),
        (lambda body: body["request"].update(unexpected=True), "request.unexpected"),
        (lambda body: body.update(task_id=""), "task_id"),
    ],
)
def test_each_malformed_field_is_named(client, agent, change, field):
    body = submission()
    change(body)

    response = post(client, "/api/v1/proposals", body)

    assert response.status_code == 400
    assert error_of(response)["field"] == field


def test_a_body_that_is_not_json_is_a_400(client, agent):
    response = post(client, "/api/v1/proposals", "{not json")

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_json"


def test_a_digest_that_does_not_match_the_action_is_refused_and_recorded(client, agent, refund_policy):
    body = submission()
    body["request"]["action"]["arguments"]["amount"] = "4000.00"  # the digest still covers 40.00

    response = post(client, "/api/v1/proposals", body)

    assert response.status_code == 400
    error = error_of(response)
    assert (error["code"], error["field"]) == ("digest_mismatch", "request.action_digest")
    assert Proposal.objects.count() == 0
    refusal = AuditEvent.objects.get(verb=Verb.INTAKE_REFUSED)
    assert refusal.data["code"] == "digest_mismatch"
    assert refusal.data["task_id"] == body["task_id"]


def test_an_oversized_body_is_refused_unread(client, agent, settings):
    settings.PROPOSAL_MAX_BYTES = 1000
    body = submission()
    body["request"]["consequences"] = {"padding": "x" * 3000}

    response = post(client, "/api/v1/proposals", body)

    assert response.status_code == 413
    assert error_of(response)["code"] == "too_large"
    assert Proposal.objects.count() == 0


def test_a_large_action_within_the_body_limit_is_refused_by_intake(client, agent, settings):
    settings.PROPOSAL_MAX_BYTES = 2000
    action = factories.refund_action()
    action["arguments"]["note"] = "x" * 2100
    body = submission(action=action)

    response = post(client, "/api/v1/proposals", body)

    assert response.status_code == 400
    assert error_of(response)["code"] == "too_large"


def test_submitting_while_halted_is_a_503(client, agent, refund_policy, admin_user):
    halt(scope="agent", agent=agent, actor=admin_user, reason="incident 42")

    response = post(client, "/api/v1/proposals", submission())

    assert response.status_code == 503
    error = error_of(response)
    assert error["code"] == "halted"
    assert "incident 42" in error["message"]
    assert Proposal.objects.count() == 0


# --- GET /api/v1/proposals/{id} --------------------------------------------------------------------


def test_the_owning_agent_reads_its_proposal_status(client, approved):
    proposal, decision = approved

    response = client.get(f"/api/v1/proposals/{proposal.id}", **AUTH)

    assert response.status_code == 200
    body = response.json()
    assert body["state"] == State.APPROVED
    assert body["task_id"] == proposal.task_id
    assert body["decision"]["jti"] == str(decision.jti)
    assert body["decision"]["decision"] == "approved"
    assert "token" not in body["decision"]


def test_another_agents_proposal_is_404(client, tenant, refund_policy):
    other = factories.make_agent(tenant, slug="other-agent", push_token="p2", api_token="other-api")
    mine = factories.make_agent(tenant, slug="mine", push_token="p1", api_token="api-secret")
    theirs = factories.submit(other)

    response = client.get(f"/api/v1/proposals/{theirs.id}", **AUTH)

    assert mine.proposals.count() == 0
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


# A well-formed id no row has (fixed: pytest-xdist needs the same test ids in every worker).
UNKNOWN_ID = "0b1d8e2c-5f4a-4c3b-9a6e-7d2f1e0c9b8a"


@pytest.mark.parametrize("proposal_id", [UNKNOWN_ID, "not-a-uuid"])
def test_an_unknown_proposal_is_404(client, agent, proposal_id):
    assert client.get(f"/api/v1/proposals/{proposal_id}", **AUTH).status_code == 404


def test_proposal_status_needs_the_token_and_refuses_post(client, approved):
    proposal, _ = approved

    assert client.get(f"/api/v1/proposals/{proposal.id}").status_code == 401
    assert post(client, f"/api/v1/proposals/{proposal.id}", {}).status_code == 405


# --- POST /api/v1/decisions/{jti}/consume ----------------------------------------------------------


def test_consume_moves_the_decision_to_executing_once(client, approved):
    proposal, decision = approved
    url = f"/api/v1/decisions/{decision.jti}/consume"

    first = post(client, url, {"rev": decision.rev})
    second = post(client, url, {"rev": decision.rev})

    assert (first.status_code, first.json()) == (200, {"state": "executing"})
    assert second.status_code == 409
    assert error_of(second)["code"] == "consumed"


def test_consume_with_a_stale_rev_is_a_409(client, approved):
    _, decision = approved

    response = post(client, f"/api/v1/decisions/{decision.jti}/consume", {"rev": decision.rev + 1})

    assert response.status_code == 409
    assert error_of(response)["code"] == "stale_rev"


def test_consume_of_a_revoked_decision_is_a_409(client, approved, reviewer_a):
    proposal, decision = approved
    revoke_decision(proposal.id, reviewer_a, reason="wrong order")

    response = post(client, f"/api/v1/decisions/{decision.jti}/consume", {"rev": decision.rev})

    assert response.status_code == 409
    assert error_of(response)["code"] == "revoked"


def test_consume_by_another_agent_is_404(client, approved, tenant):
    _, decision = approved
    factories.make_agent(tenant, slug="other-agent", push_token="p2", api_token="other-api")

    response = post(
        client,
        f"/api/v1/decisions/{decision.jti}/consume",
        {"rev": decision.rev},
        HTTP_AUTHORIZATION="Bearer other-api",
    )

    assert response.status_code == 404
    assert Decision.objects.get(pk=decision.pk).consumed_at is None


def test_consume_needs_a_rev(client, approved):
    _, decision = approved

    response = post(client, f"/api/v1/decisions/{decision.jti}/consume", {})

    assert response.status_code == 400
    assert error_of(response)["field"] == "rev"


def test_consume_refuses_get_and_a_missing_token(client, approved):
    _, decision = approved
    url = f"/api/v1/decisions/{decision.jti}/consume"

    assert client.get(url, **AUTH).status_code == 405
    assert (
        client.post(url, data=json.dumps({"rev": decision.rev}), content_type="application/json").status_code
        == 401
    )


@pytest.mark.parametrize("jti", [UNKNOWN_ID, "nope"])
def test_consume_of_an_unknown_decision_is_404(client, agent, jti):
    assert post(client, f"/api/v1/decisions/{jti}/consume", {"rev": 1}).status_code == 404


# --- POST /api/v1/decisions/{jti}/outcome ----------------------------------------------------------


def test_outcome_settles_an_execution(client, approved):
    proposal, decision = approved
    post(client, f"/api/v1/decisions/{decision.jti}/consume", {"rev": decision.rev})

    response = post(
        client,
        f"/api/v1/decisions/{decision.jti}/outcome",
        {"status": "succeeded", "transaction_id": "tx-77"},
    )

    assert (response.status_code, response.json()) == (200, {"state": "succeeded"})
    proposal.refresh_from_db()
    assert (proposal.state, proposal.transaction_id) == (State.SUCCEEDED, "tx-77")


def test_outcome_unknown_then_failed(client, approved):
    _, decision = approved
    post(client, f"/api/v1/decisions/{decision.jti}/consume", {"rev": decision.rev})
    url = f"/api/v1/decisions/{decision.jti}/outcome"

    assert post(client, url, {"status": "unknown", "detail": "response lost"}).json() == {"state": "unknown"}
    assert post(client, url, {"status": "failed"}).json() == {"state": "failed"}


def test_outcome_before_consume_is_a_409(client, approved):
    _, decision = approved

    response = post(client, f"/api/v1/decisions/{decision.jti}/outcome", {"status": "succeeded"})

    assert response.status_code == 409
    assert error_of(response)["code"] == "not_executing"


def test_outcome_with_a_bad_status_is_a_400(client, approved):
    _, decision = approved

    response = post(client, f"/api/v1/decisions/{decision.jti}/outcome", {"status": "done"})

    assert response.status_code == 400
    assert error_of(response)["field"] == "status"


def test_outcome_refuses_get_and_other_agents(client, approved, tenant):
    _, decision = approved
    factories.make_agent(tenant, slug="other-agent", push_token="p2", api_token="other-api")
    url = f"/api/v1/decisions/{decision.jti}/outcome"

    assert client.get(url, **AUTH).status_code == 405
    assert post(client, url, {"status": "failed"}, HTTP_AUTHORIZATION="Bearer other-api").status_code == 404


# --- the OpenAPI document --------------------------------------------------------------------------


def test_the_openapi_document_describes_the_endpoints_and_bearer_auth(client):
    response = client.get("/api/v1/openapi.json")

    assert response.status_code == 200
    document = response.json()
    assert {
        "/api/v1/proposals",
        "/api/v1/proposals/{proposal_id}",
        "/api/v1/decisions/{jti}/consume",
        "/api/v1/decisions/{jti}/outcome",
    } <= set(document["paths"])
    assert any(
        scheme.get("scheme") == "bearer" for scheme in document["components"]["securitySchemes"].values()
    )
