import pytest

from accounts.stepup import step_up_for
from approvals.models import Decision, OutboxMessage
from approvals.services.votes import cast_vote
from approvals.states import State
from audit.chain.verification import verify_chain
from lib.errors import VoteRefused
from tests.factories import submit, totp_code

pytestmark = pytest.mark.django_db


def test_one_finance_approval_releases_a_signed_decision(agent, refund_policy, requester, reviewer_a):
    proposal = submit(agent)
    assert proposal.state == State.AWAITING_REVIEW

    cast_vote(
        proposal.id,
        reviewer_a,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
    )

    proposal.refresh_from_db()
    assert proposal.state == State.APPROVED
    assert Decision.objects.get(proposal=proposal).kind == "approved"
    assert OutboxMessage.objects.filter(proposal=proposal, kind="continue").count() == 1
    assert verify_chain(f"tenant:{proposal.tenant_id}").ok


def test_requester_cannot_approve_own_proposal(agent, refund_policy, requester):
    proposal = submit(agent)
    with pytest.raises(VoteRefused) as refused:
        cast_vote(
            proposal.id,
            requester,
            verdict="approve",
            digest_seen=proposal.action_digest,
            step_up=step_up_for(requester, totp_code(requester)),
        )
    assert refused.value.code == "self_approval"
