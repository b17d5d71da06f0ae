"""The pull path: GET /api/v1/proposals/<id>/decision?wait=N answers the same signed token the A2A
continuation carries, only to the proposal's own agent. Through Django's test client, as here, it
answers at once; the wait itself is served on the event loop (tests/approvals/test_decision_wait.py)."""

import jwt
import pytest

from approvals.models import Decision
from approvals.services.reconcile import expire_due
from approvals.services.votes import cast_vote, edit_proposal
from reviewer_gate import gate
from tests import factories
from tests.factories import step_up_for, totp_code

AUTH = {"HTTP_AUTHORIZATION": "Bearer api-secret"}


def pull_decision(client, proposal, wait=0, **headers):
    return client.get(f"/api/v1/proposals/{proposal.id}/decision?wait={wait}", **{**AUTH, **headers})


def approve(proposal, reviewer):
    cast_vote(
        proposal.id,
        reviewer,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer, totp_code(reviewer)),
    )


@pytest.mark.django_db
def test_an_undecided_proposal_answers_null_and_its_state(client, agent, refund_policy, requester):
    proposal = factories.submit(agent)
    response = pull_decision(client, proposal)
    assert response.status_code == 200
    assert response.json() == {"token": None, "state": "awaiting_review", "proposal_id": str(proposal.id)}


@pytest.mark.django_db
def test_a_decided_proposal_answers_the_continuations_token(
    client, agent, refund_policy, requester, reviewer_a
):
    proposal = factories.submit(agent)
    approve(proposal, reviewer_a)
    decision = Decision.objects.get(proposal=proposal)

    body = pull_decision(client, proposal).json()

    assert body == {"token": decision.token, "state": "approved", "proposal_id": str(proposal.id)}
    claims = jwt.decode(body["token"], options={"verify_signature": False})
    assert (claims["sub"], claims["request_id"], claims["decision"]) == (
        proposal.task_id,
        proposal.request_id,
        "approved",
    )


@pytest.mark.django_db
def test_the_token_verifies_with_the_gate_against_what_the_agent_asked(
    client, agent, refund_policy, requester, reviewer_a, settings
):
    proposal = factories.submit(agent)
    approve(proposal, reviewer_a)
    token = pull_decision(client, proposal).json()["token"]
    jwks = client.get("/.well-known/jwks.json").json()
    the_gate = gate.Gate(
        issuer=settings.REVIEWER_ISSUER,
        audience=agent.audience,
        keys=gate.StaticKeySource(jwks),
        used_store=gate.MemoryUsedStore(),
    )
    decision = the_gate.verify(
        token, task_id=proposal.task_id, request_id=proposal.request_id, action_digest=proposal.action_digest
    )
    assert decision.approved and decision.jti == str(Decision.objects.get(proposal=proposal).jti)


@pytest.mark.django_db
def test_a_policy_denial_answers_a_signed_rejection(client, agent, tenant, requester):
    factories.make_policy(tenant, "no-refunds", tool_pattern="payments.refund", outcome="deny")
    proposal = factories.submit(agent)
    body = pull_decision(client, proposal).json()
    assert body["state"] == "denied"
    assert jwt.decode(body["token"], options={"verify_signature": False})["decision"] == "rejected"


@pytest.mark.django_db
def test_an_expired_proposal_answers_null_and_its_state(client, agent, refund_policy, requester):
    proposal = factories.submit(agent)
    expire_due(now=proposal.expires_at)
    assert pull_decision(client, proposal, wait=30).json() == {
        "token": None,
        "state": "expired",
        "proposal_id": str(proposal.id),
    }


@pytest.mark.django_db
def test_a_reviewers_edit_is_followed_to_the_new_proposals_decision(
    client, agent, refund_policy, requester, reviewer_a, reviewer_b
):
    proposal = factories.submit(agent)
    edited = edit_proposal(
        proposal.id,
        reviewer_a,
        arguments={**proposal.action["arguments"], "amount": "25.00"},
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
    )
    assert pull_decision(client, proposal).json() == {
        "token": None,
        "state": "awaiting_review",
        "proposal_id": str(edited.id),
    }
    approve(edited, reviewer_b)
    body = pull_decision(client, proposal).json()
    assert body["proposal_id"] == str(edited.id)
    assert (
        jwt.decode(body["token"], options={"verify_signature": False})["replaces"][-1] == proposal.request_id
    )


@pytest.mark.django_db
def test_only_the_proposals_own_agent_reads_it(client, agent, tenant, refund_policy, requester, reviewer_a):
    proposal = factories.submit(agent)
    approve(proposal, reviewer_a)
    factories.make_agent(tenant, slug="other", push_token="p2", api_token="other-secret")
    assert pull_decision(client, proposal, HTTP_AUTHORIZATION="Bearer other-secret").status_code == 404
    assert pull_decision(client, proposal, HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get(f"/api/v1/proposals/{proposal.id}/decision").status_code == 401


@pytest.mark.django_db
@pytest.mark.parametrize("wait", ["61", "-1", "soon"])
def test_a_wait_out_of_bounds_is_a_400_naming_it(client, agent, refund_policy, requester, wait):
    proposal = factories.submit(agent)
    response = client.get(f"/api/v1/proposals/{proposal.id}/decision?wait={wait}", **AUTH)
    assert response.status_code == 400
    assert response.json()["error"]["field"] == "wait"


@pytest.mark.django_db
def test_the_openapi_document_describes_the_pull(client):
    document = client.get("/api/v1/openapi.json").json()
    operation = document["paths"]["/api/v1/proposals/{proposal_id}/decision"]["get"]
    assert [p["name"] for p in operation["parameters"]] == ["proposal_id", "wait"]
    assert set(operation["responses"]) >= {"200", "401", "404", "429"}
