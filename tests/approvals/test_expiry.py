"""Expiry closes: silence never approves. `expire_due` expires waiting proposals and released-but-unconsumed
decisions at their time and queues CancelTask; a vote or a consume after expiry is refused by the server
clock even when the sweeper has not run. Clocks are faked with `now=`."""

from datetime import timedelta

import jwt
import pytest

from accounts.stepup import step_up_for
from approvals.models import Decision, OutboxMessage, PolicyVersion
from approvals.services.decisions import consume_decision
from approvals.services.reconcile import expire_due
from approvals.services.votes import cast_vote, request_info
from approvals.states import State
from audit.models import AuditEvent, Verb
from lib.errors import ConsumeRefused, VoteRefused
from tests import factories
from tests.factories import approve, fresh_step_up, submit, totp_code

pytestmark = pytest.mark.django_db

SECOND = timedelta(seconds=1)


def cancels_for(proposal) -> list[OutboxMessage]:
    return list(OutboxMessage.objects.filter(proposal=proposal, kind=OutboxMessage.Kind.CANCEL))


# ---------------------------------------------------------------------------------------------------
# The sweeper


def test_a_waiting_proposal_is_not_expired_before_its_time(agent, refund_policy, requester):
    proposal = submit(agent)

    assert expire_due(now=proposal.expires_at - SECOND) == 0

    proposal.refresh_from_db()
    assert proposal.state == State.AWAITING_REVIEW


def test_a_waiting_proposal_expires_at_its_time_and_its_task_is_cancelled(agent, refund_policy, requester):
    proposal = submit(agent)

    assert expire_due(now=proposal.expires_at) == 1

    proposal.refresh_from_db()
    assert proposal.state == State.EXPIRED
    [cancel] = cancels_for(proposal)
    assert cancel.message_id == f"cancel-{proposal.id}"
    event = AuditEvent.objects.filter(verb=Verb.PROPOSAL_TRANSITIONED, data__to="expired").get()
    assert event.actor == "system"
    assert event.data["from"] == "awaiting_review"


def test_a_proposal_waiting_for_an_answer_expires_too(agent, refund_policy, requester, reviewer_a):
    proposal = submit(agent)
    request_info(
        proposal.id,
        reviewer_a,
        question="Which order?",
        digest_seen=proposal.action_digest,
        step_up=fresh_step_up(reviewer_a),
    )

    assert expire_due(now=proposal.expires_at + SECOND) == 1

    proposal.refresh_from_db()
    assert proposal.state == State.EXPIRED
    assert len(cancels_for(proposal)) == 1


def test_an_approved_decision_not_consumed_in_time_expires(agent, refund_policy, requester, reviewer_a):
    proposal, decision = approve(agent, reviewer_a)

    assert expire_due(now=decision.expires_at - SECOND) == 0
    assert expire_due(now=decision.expires_at) == 1

    proposal.refresh_from_db()
    assert proposal.state == State.EXPIRED
    assert len(cancels_for(proposal)) == 1
    with pytest.raises(ConsumeRefused) as refused:
        consume_decision(agent, decision.jti, rev=decision.rev, now=decision.expires_at - SECOND)
    assert refused.value.code == "expired"


def test_a_policy_allowed_decision_not_consumed_in_time_expires(tenant, agent, requester):
    factories.make_policy(
        tenant,
        "small-refunds",
        outcome=PolicyVersion.Outcome.ALLOW,
        tool_pattern="payments.refund",
        ttl_seconds=60,
    )
    proposal = submit(agent)
    decision = Decision.objects.get(proposal=proposal)

    assert expire_due(now=decision.expires_at) == 1

    proposal.refresh_from_db()
    assert proposal.state == State.EXPIRED
    assert len(cancels_for(proposal)) == 1


def test_an_executing_proposal_never_expires(agent, refund_policy, requester, reviewer_a):
    proposal, decision = approve(agent, reviewer_a)
    consume_decision(agent, decision.jti, rev=decision.rev)

    assert expire_due(now=decision.expires_at + timedelta(days=30)) == 0

    proposal.refresh_from_db()
    assert proposal.state == State.EXECUTING


def test_decided_proposals_are_left_alone(agent, refund_policy, requester, reviewer_a):
    proposal = submit(agent)
    cast_vote(
        proposal.id,
        reviewer_a,
        verdict="reject",
        digest_seen=proposal.action_digest,
        reason="no",
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
    )

    assert expire_due(now=proposal.expires_at + timedelta(days=1)) == 0

    proposal.refresh_from_db()
    assert proposal.state == State.REJECTED


def test_sweeping_twice_expires_once_and_cancels_once(agent, refund_policy, requester):
    proposal = submit(agent)

    assert expire_due(now=proposal.expires_at) == 1
    assert expire_due(now=proposal.expires_at + SECOND) == 0

    assert len(cancels_for(proposal)) == 1
    assert AuditEvent.objects.filter(verb=Verb.PROPOSAL_TRANSITIONED, data__to="expired").count() == 1


def test_the_sweeper_counts_every_proposal_it_expired(agent, refund_policy, requester, reviewer_a):
    waiting = submit(agent)
    _, decision = approve(agent, reviewer_a)
    later = max(waiting.expires_at, decision.expires_at)

    assert expire_due(now=later) == 2


def test_an_agent_requested_expiry_earlier_than_the_policy_ttl_wins(agent, refund_policy, requester):
    soon = factories.in_seconds(120)
    proposal = submit(agent, expires_at=soon)

    assert abs((proposal.expires_at - soon).total_seconds()) < 1
    assert expire_due(now=soon + SECOND) == 1


# ---------------------------------------------------------------------------------------------------
# The server clock, sweeper or not


def test_a_vote_after_expiry_is_refused_even_if_the_sweeper_has_not_run(
    agent, refund_policy, requester, reviewer_a
):
    proposal = submit(agent)

    with pytest.raises(VoteRefused) as refused:
        cast_vote(
            proposal.id,
            reviewer_a,
            verdict="approve",
            digest_seen=proposal.action_digest,
            step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
            now=proposal.expires_at,
        )

    assert refused.value.code == "expired"
    proposal.refresh_from_db()
    assert proposal.state == State.EXPIRED
    assert not proposal.votes.exists()
    assert not Decision.objects.filter(proposal=proposal).exists()
    assert len(cancels_for(proposal)) == 1
    assert AuditEvent.objects.filter(verb=Verb.VOTE_REFUSED, data__code="expired").count() == 1


def test_a_vote_just_before_expiry_counts(agent, refund_policy, requester, reviewer_a):
    proposal = submit(agent)

    cast_vote(
        proposal.id,
        reviewer_a,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
        now=proposal.expires_at - SECOND,
    )

    proposal.refresh_from_db()
    assert proposal.state == State.APPROVED


def test_a_consume_after_expiry_is_refused_even_if_the_sweeper_has_not_run(
    agent, refund_policy, requester, reviewer_a
):
    proposal, decision = approve(agent, reviewer_a)

    with pytest.raises(ConsumeRefused) as refused:
        consume_decision(agent, decision.jti, rev=decision.rev, now=decision.expires_at + SECOND)

    assert refused.value.code == "expired"
    proposal.refresh_from_db()
    decision.refresh_from_db()
    assert proposal.state == State.EXPIRED
    assert decision.consumed_at is None
    assert len(cancels_for(proposal)) == 1


def test_a_decision_never_outlives_the_longest_token_lifetime(settings, tenant, agent, requester):
    settings.DECISION_TOKEN_MAX_SECONDS = 300
    factories.make_policy(
        tenant, "slow", outcome=PolicyVersion.Outcome.ALLOW, tool_pattern="payments.refund", ttl_seconds=86400
    )
    proposal = submit(agent)
    decision = Decision.objects.get(proposal=proposal)

    assert decision.expires_at - decision.issued_at == timedelta(seconds=300)


def test_a_rejection_keeps_its_token_lifetime_past_the_requests_expiry(
    settings, agent, refund_policy, requester, reviewer_a
):
    """docs/agents/decision-token.md, Lifetime: a rejection releases nothing, so its token lives its own
    lifetime (the policy's TTL capped by DECISION_TOKEN_MAX_SECONDS) for the agent to read, even past the
    request's `expires_at`; only an approval is cut at the proposal's expiry."""
    settings.DECISION_TOKEN_MAX_SECONDS = 3600
    proposal = submit(agent, expires_at=factories.in_seconds(120))
    assert proposal.expires_at <= factories.in_seconds(121)
    factories.vote(proposal, reviewer_a, verdict="reject", reason="duplicate")
    decision = Decision.objects.get(proposal=proposal)
    claims = jwt.decode(decision.token, options={"verify_signature": False})
    assert decision.kind == "rejected"
    assert decision.expires_at - decision.issued_at == timedelta(seconds=3600)
    assert claims["exp"] == int(decision.expires_at.timestamp()) and decision.expires_at > proposal.expires_at
