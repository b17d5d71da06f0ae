"""What a strict agent checks in the signed decision.

The policy claims name every version that shaped the decision (never null, the tenant default included),
and an approval never outlives the request's own deadline: the token's exp, consume and the gate agree."""

import json
from datetime import timedelta

import jwt
import pytest
import time_machine
from django.utils import timezone

from accounts.stepup import step_up_for
from approvals.models import Decision
from approvals.services.decisions import consume_decision
from approvals.services.votes import cast_vote
from approvals.states import State
from lib.errors import ConsumeRefused
from reviewer_gate import gate
from tests import factories
from tests.factories import approve, in_seconds, submit, totp_code, verified_client

pytestmark = pytest.mark.django_db

AUTH = {"HTTP_AUTHORIZATION": "Bearer api-secret"}
DEFAULT = {"id": "tenant-default", "version": 1}


def claims_of(decision: Decision) -> dict:
    return jwt.decode(decision.token, options={"verify_signature": False})


def strict_gate(client, agent) -> gate.Gate:
    """The agent-side gate, with the keys Reviewer publishes."""
    decision = Decision.objects.first()
    assert decision is not None
    return gate.Gate(
        issuer=claims_of(decision)["iss"],
        audience=agent.audience,
        keys=gate.StaticKeySource(client.get("/.well-known/jwks.json").json()),
        used_store=gate.MemoryUsedStore(),
    )


def vote(proposal, reviewer):
    cast_vote(
        proposal.id,
        reviewer,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer, totp_code(reviewer)),
    )


def test_a_tenant_default_decision_names_the_default_as_its_policy_and_the_gate_accepts_it(
    client, agent, requester, admin_user
):
    # No policy matches: the tenant admins decide (fail closed); reversible, so one admin suffices.
    proposal = submit(agent, consequences={"effect": "Money back", "reversible": True})
    vote(proposal, admin_user)

    decision = Decision.objects.get(proposal=proposal)
    claims = claims_of(decision)
    assert claims["policy"] == DEFAULT and claims["policies"] == [DEFAULT]
    verified = strict_gate(client, agent).verify(
        decision.token,
        task_id=proposal.task_id,
        request_id=proposal.request_id,
        action_digest=proposal.action_digest,
    )
    assert verified.approved and verified.policy == DEFAULT


def test_a_stricter_version_activated_while_waiting_is_named_in_the_token_and_on_the_page(
    tenant, agent, refund_policy, requester, reviewer_a, reviewer_b
):
    proposal = submit(agent)  # pinned refunds@1: one finance approval
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 2}]
    )
    vote(proposal, reviewer_a)
    proposal.refresh_from_db()
    assert proposal.state == State.AWAITING_REVIEW  # v2's quorum applies
    vote(proposal, reviewer_b)

    claims = claims_of(Decision.objects.get(proposal=proposal))
    shaped = [{"id": "refunds", "version": 1}, {"id": "refunds", "version": 2}]
    assert claims["policy"] == {"id": "refunds", "version": 2}
    assert claims["policies"] == shaped
    assert claims["quorum"]["required"] == [{"group": "finance", "count": 2}]
    page = verified_client(reviewer_a).get(f"/proposals/{proposal.id}/").content.decode()
    assert "refunds@1" in page and "refunds@2" in page


def test_a_policy_activated_while_the_tenant_default_waits_is_named_with_the_default(
    tenant, agent, requester, admin_user, reviewer_a
):
    proposal = submit(agent, consequences={"effect": "Money back", "reversible": True})  # default: one admin
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 1}]
    )
    vote(proposal, admin_user)
    vote(proposal, reviewer_a)  # both requirements stand: the admins' and the policy's

    claims = claims_of(Decision.objects.get(proposal=proposal))
    assert claims["policy"] == {"id": "refunds", "version": 1}
    assert claims["policies"] == [{"id": "refunds", "version": 1}, DEFAULT]
    page = verified_client(admin_user).get(f"/proposals/{proposal.id}/").content.decode()
    assert "refunds@1" in page and "tenant-default@1" in page


def test_an_approval_expires_no_later_than_the_requests_own_expires_at(
    client, agent, refund_policy, requester, reviewer_a
):
    deadline = in_seconds(120)  # the policy's TTL (3600 s) and the token maximum are later
    proposal, decision = approve(agent, reviewer_a, expires_at=deadline)

    assert decision.expires_at <= deadline
    assert claims_of(decision)["exp"] <= int(deadline.timestamp())

    # The scenario: consume 12 seconds after the request's deadline answers 409 expired.
    with time_machine.travel(deadline + timedelta(seconds=12), tick=False):
        response = client.post(
            f"/api/v1/decisions/{decision.jti}/consume",
            json.dumps({"rev": decision.rev}),
            content_type="application/json",
            **AUTH,
        )
    assert response.status_code == 409 and response.json()["error"]["code"] == "expired"
    proposal.refresh_from_db()
    assert proposal.state == State.EXPIRED


def test_consume_refuses_past_the_proposals_expiry_even_for_a_longer_token(
    agent, refund_policy, requester, reviewer_a
):
    """A decision stored before tokens were capped (exp later than the proposal's expiry)."""
    proposal, decision = approve(agent, reviewer_a, expires_at=in_seconds(120))
    Decision.objects.filter(pk=decision.pk).update(expires_at=timezone.now() + timedelta(hours=1))
    with pytest.raises(ConsumeRefused) as refused:
        consume_decision(agent, decision.jti, rev=decision.rev, now=proposal.expires_at)
    assert refused.value.code == "expired"
