"""Standing grants over the agents' REST API (/api/v1/): a grant request is an ordinary submission of
`reviewer.grant`; its refusals are errors in the one shape, and nothing is stored; a call a grant
decides answers its token at once, with the `grant` claim, and the agent's gate accepts it; its consume
is refused once the grant is revoked."""

import json
import uuid

import jwt
import pytest

from approvals.models import Decision, Grant, Proposal
from approvals.services.grants import revoke_grant
from approvals.states import State
from reviewer_gate import gate
from tests import factories
from tests.approvals.grant_helpers import grant_action, grant_policy
from tests.factories import approval_request

pytestmark = pytest.mark.django_db

AUTH = {"HTTP_AUTHORIZATION": "Bearer api-secret"}


def post(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json", **AUTH)


def submission(**request_kwargs) -> dict:
    return {
        "task_id": f"task-{uuid.uuid4()}",
        "context_id": "ctx-1",
        "request": approval_request(**request_kwargs),
    }


@pytest.fixture
def grant(client, tenant, agent, refund_policy, requester, reviewer_a, reviewer_b):
    grant_policy(tenant)
    response = post(
        client, "/api/v1/proposals", submission(action=grant_action(), summary="Refunds, one week")
    )
    assert response.status_code == 201 and response.json()["state"] == State.AWAITING_REVIEW
    proposal = Proposal.objects.get(pk=response.json()["proposal_id"])
    factories.vote(proposal, reviewer_a)
    factories.vote(proposal, reviewer_b)
    return Grant.objects.get(proposal=proposal)


def test_a_call_under_a_grant_answers_its_token_at_once_with_the_grant_claim(client, agent, grant):
    body = submission(action=factories.refund_action(amount="25.00"))

    response = post(client, "/api/v1/proposals", body)

    assert response.status_code == 201
    answer = response.json()
    assert answer["state"] == State.ALLOWED and answer["token"]
    issuer = jwt.decode(answer["token"], options={"verify_signature": False})["iss"]
    the_gate = gate.Gate(
        issuer=issuer,
        audience=agent.audience,
        keys=gate.StaticKeySource(client.get("/.well-known/jwks.json").json()),
        used_store=gate.MemoryUsedStore(),
    )
    request = body["request"]
    verified = the_gate.verify(
        answer["token"],
        task_id=body["task_id"],
        request_id=request["request_id"],
        action_digest=request["action_digest"],
    )
    assert verified.approved
    claims = jwt.decode(answer["token"], options={"verify_signature": False})
    assert claims["grant"] == {"id": str(grant.id), "uses_left": 29, "amount_left": {"EUR": "575.00"}}


def test_the_consume_of_a_decision_under_a_revoked_grant_is_refused(client, agent, grant, reviewer_a):
    response = post(client, "/api/v1/proposals", submission(action=factories.refund_action(amount="25.00")))
    decision = Decision.objects.get(proposal_id=response.json()["proposal_id"])

    revoke_grant(grant.id, reviewer_a, reason="stop")
    consumed = post(client, f"/api/v1/decisions/{decision.jti}/consume", {"rev": decision.rev})

    assert consumed.status_code == 409
    assert consumed.json()["error"]["code"] == "revoked"


@pytest.mark.parametrize(
    ("overrides", "code", "field"),
    [
        ({"condition": "args.amount <"}, "bad_grant", "request.action.arguments.condition"),
        ({"expires_at": "2020-01-01T00:00:00Z"}, "bad_grant", "request.action.arguments.expires_at"),
    ],
)
def test_a_grant_that_cannot_be_granted_is_a_400_and_nothing_is_stored(
    client, agent, refund_policy, overrides, code, field
):
    response = post(client, "/api/v1/proposals", submission(action=grant_action(**overrides)))

    assert response.status_code == 400
    assert response.json()["error"]["code"] == code and response.json()["error"]["field"] == field
    assert not Proposal.objects.exists() and not Grant.objects.exists()


def test_a_grant_for_a_forbidden_tool_is_a_400_and_nothing_is_stored(client, tenant, agent, refund_policy):
    factories.make_policy(tenant, "refunds-by-people", tool_pattern="payments.refund", forbid_grants=True)

    response = post(client, "/api/v1/proposals", submission(action=grant_action()))

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "grant_forbidden"
    assert not Proposal.objects.exists()
