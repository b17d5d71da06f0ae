"""Quorum (DESIGN.md "Policy"): every threshold is required, a person fills at most one slot, a person
counts once, and any eligible reject ends the proposal at once."""

import jwt
import pytest
from django.db import IntegrityError, transaction

from accounts.stepup import step_up_for
from approvals.models import Decision, Proposal, Vote
from approvals.services.quorum import count_quorum
from approvals.services.votes import cast_vote
from approvals.states import State
from lib.errors import VoteRefused
from tests import factories
from tests.factories import submit, totp_code, trail_name

pytestmark = pytest.mark.django_db

FINANCE_1_OPS_2 = [{"group": "finance", "count": 1}, {"group": "ops", "count": 2}]
FINANCE_1_OPS_1 = [{"group": "finance", "count": 1}, {"group": "ops", "count": 1}]


def vote(proposal, user, verdict="approve", reason=""):
    return cast_vote(
        proposal.id,
        user,
        verdict=verdict,
        digest_seen=proposal.action_digest,
        step_up=step_up_for(user, totp_code(user)),
        reason=reason,
    )


def state_of(proposal) -> str:
    proposal.refresh_from_db()
    return proposal.state


@pytest.fixture
def reviewer_d(tenant):
    return factories.make_user("reviewer_d", tenant=tenant, groups=["ops"], first_name="Dan")


@pytest.fixture
def dual(tenant):
    """In finance and in ops: may fill either slot, never both."""
    return factories.make_user("dual", tenant=tenant, groups=["finance", "ops"], first_name="Dee")


def test_all_thresholds_are_required_one_finance_and_two_ops(
    agent, tenant, requester, reviewer_a, reviewer_c, reviewer_d
):
    factories.make_policy(tenant, "refunds", thresholds=FINANCE_1_OPS_2)
    proposal = submit(agent)

    vote(proposal, reviewer_c)
    vote(proposal, reviewer_d)
    assert state_of(proposal) == State.AWAITING_REVIEW  # ops is full, finance is not

    vote(proposal, reviewer_a)
    assert state_of(proposal) == State.APPROVED
    claims = jwt.decode(Decision.objects.get(proposal=proposal).token, options={"verify_signature": False})
    assert claims["quorum"]["required"] == FINANCE_1_OPS_2
    # Pseudonyms are random: both sides sorted, not the names' order.
    assert sorted(claims["quorum"]["approved_by"]) == sorted(
        [trail_name("reviewer_a"), trail_name("reviewer_c"), trail_name("reviewer_d")]
    )
    assert sorted((a["sub"], a["group"]) for a in claims["approvers"]) == sorted(
        [
            (trail_name("reviewer_a"), "finance"),
            (trail_name("reviewer_c"), "ops"),
            (trail_name("reviewer_d"), "ops"),
        ]
    )


def test_more_approvals_in_one_group_do_not_fill_another(
    agent, tenant, requester, reviewer_a, reviewer_b, reviewer_c
):
    factories.make_policy(tenant, "refunds", thresholds=FINANCE_1_OPS_2)
    proposal = submit(agent)

    vote(proposal, reviewer_a)
    vote(proposal, reviewer_b)
    vote(proposal, reviewer_c)

    assert state_of(proposal) == State.AWAITING_REVIEW
    assert count_quorum(proposal).missing() == [{"group": "ops", "count": 1}]


def test_one_person_in_two_groups_fills_at_most_one_slot(agent, tenant, requester, dual):
    factories.make_policy(tenant, "refunds", thresholds=FINANCE_1_OPS_1)
    proposal = submit(agent)

    vote(proposal, dual)

    assert state_of(proposal) == State.AWAITING_REVIEW
    quorum = count_quorum(proposal)
    assert sum(len(votes) for votes in quorum.slots.values()) == 1
    assert not quorum.met


@pytest.mark.parametrize("dual_first", [True, False], ids=["dual-member-first", "dual-member-last"])
def test_a_person_in_two_groups_takes_whichever_slot_completes_the_quorum(
    agent, tenant, requester, reviewer_a, dual, dual_first
):
    """reviewer_a can only fill finance; dual is placed in ops, even if dual voted first and a greedy count
    would have put them in finance."""
    factories.make_policy(tenant, "refunds", thresholds=FINANCE_1_OPS_1)
    proposal = submit(agent)

    for person in [dual, reviewer_a] if dual_first else [reviewer_a, dual]:
        vote(proposal, person)

    assert state_of(proposal) == State.APPROVED
    placed = count_quorum(proposal).slots
    slots = {slug: [v.voter.username for v in votes] for slug, votes in placed.items()}
    assert slots == {"finance": ["reviewer_a"], "ops": ["dual"]}


def test_the_same_person_voting_twice_counts_once(agent, tenant, requester, reviewer_a):
    factories.make_policy(tenant, "refunds", thresholds=[{"group": "finance", "count": 2}])
    proposal = submit(agent)
    vote(proposal, reviewer_a)

    with pytest.raises(VoteRefused) as refused:
        vote(proposal, reviewer_a)

    assert refused.value.code == "already_voted"
    assert Vote.objects.filter(proposal=proposal, voter=reviewer_a).count() == 1
    assert state_of(proposal) == State.AWAITING_REVIEW


def test_the_database_refuses_a_second_vote_row_for_the_same_person(
    agent, refund_policy, requester, reviewer_a
):
    proposal = submit(agent)
    first = vote(proposal, reviewer_a)

    with pytest.raises(IntegrityError), transaction.atomic():
        Vote.objects.create(
            proposal=proposal,
            voter=reviewer_a,
            verdict="approve",
            digest_seen=first.digest_seen,
            auth_method="totp",
            auth_at=first.auth_at,
        )


def test_any_eligible_reject_ends_the_proposal_as_rejected_at_once(
    agent, tenant, requester, reviewer_a, reviewer_b, reviewer_c
):
    factories.make_policy(tenant, "refunds", thresholds=FINANCE_1_OPS_2)
    proposal = submit(agent)
    vote(proposal, reviewer_c)  # one ops approval already in

    vote(proposal, reviewer_a, "reject", reason="the customer was already refunded")

    assert state_of(proposal) == State.REJECTED
    decision = Decision.objects.get(proposal=proposal)
    assert decision.kind == Decision.Kind.REJECTED
    assert decision.reason == "the customer was already refunded"
    with pytest.raises(VoteRefused) as refused:
        vote(proposal, reviewer_b)
    assert refused.value.code == "not_open"


def test_a_reject_from_someone_outside_the_needed_groups_is_refused_and_ends_nothing(
    agent, refund_policy, requester, reviewer_c
):
    proposal = submit(agent)  # needs finance; reviewer_c is in ops only

    with pytest.raises(VoteRefused) as refused:
        vote(proposal, reviewer_c, "reject", reason="no")

    assert refused.value.code == "not_eligible"
    assert state_of(proposal) == State.AWAITING_REVIEW
    assert not Decision.objects.filter(proposal=proposal).exists()


def test_a_rejection_needs_a_reason(agent, refund_policy, requester, reviewer_a):
    proposal = submit(agent)

    with pytest.raises(VoteRefused) as refused:
        vote(proposal, reviewer_a, "reject", reason="  ")

    assert refused.value.code == "reason_required"
    assert state_of(proposal) == State.AWAITING_REVIEW


def test_each_approvers_reason_is_in_the_signed_decision(
    agent, tenant, requester, reviewer_a, reviewer_c, reviewer_d
):
    factories.make_policy(tenant, "refunds", thresholds=FINANCE_1_OPS_1)
    proposal = submit(agent)
    vote(proposal, reviewer_a, reason="Matches ticket 1182")
    vote(proposal, reviewer_c)
    claims = jwt.decode(Decision.objects.get(proposal=proposal).token, options={"verify_signature": False})
    reasons = {a["sub"]: a["reason"] for a in claims["approvers"]}
    assert reasons == {trail_name("reviewer_a"): "Matches ticket 1182", trail_name("reviewer_c"): ""}


def test_an_approval_with_a_reservation_is_signed_and_can_ask_for_a_second_approver(
    agent, tenant, requester, reviewer_a, reviewer_b
):
    from approvals.models import PolicyVersion
    from audit.chain.sequencer import sequence_pending
    from audit.metrics.queue import collect
    from audit.models import AuditEvent, Verb

    factories.make_policy(tenant, "refunds", thresholds=[{"group": "finance", "count": 1}])
    PolicyVersion.objects.filter(policy__slug="refunds").update(reservation_needs_second=True)
    proposal = submit(agent)
    cast_vote(
        proposal.id,
        reviewer_a,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
        reservation="Amount looks high for this customer",
    )
    assert state_of(proposal) == State.AWAITING_REVIEW  # the reservation asks for one more finance approval
    assert count_quorum(Proposal.objects.get(pk=proposal.pk)).required == [{"group": "finance", "count": 2}]
    vote(proposal, reviewer_b)
    assert state_of(proposal) == State.APPROVED
    claims = jwt.decode(Decision.objects.get(proposal=proposal).token, options={"verify_signature": False})
    reservations = {a["sub"]: a["reservation"] for a in claims["approvers"]}
    assert reservations == {
        trail_name("reviewer_a"): "Amount looks high for this customer",
        trail_name("reviewer_b"): "",
    }
    cast = AuditEvent.objects.filter(verb=Verb.VOTE_CAST, data__reservation__startswith="Amount")
    assert cast.count() == 1
    sequence_pending()  # metrics read the chained trail (the sequencer runs after commit)
    first_cast = cast.first()
    assert first_cast is not None
    by_policy = collect(first_cast.chain).by_policy
    group = next(g for label, g in by_policy.items() if label.startswith("refunds") or "@" in label)
    assert (group.reservations, group.approvals_cast, group.reservation_rate) == (1, 2, 0.5)
