"""Budgeted break-glass: a named person releases alone in an emergency, within a weekly
budget and an amount cap, with a reason and a fresh step-up; two other people review it afterwards."""

from datetime import timedelta

import jwt
import pytest
from django.utils import timezone

from accounts.stepup import step_up_for
from approvals.models import BreakGlassRelease, Decision, PostHocReview, Vote
from approvals.services.break_glass import (
    break_glass_release,
    complete_post_hoc_review,
    note_overdue_reviews,
    open_reviews_for,
)
from approvals.services.policies import create_policy, create_policy_version
from approvals.states import State
from audit.chain.sequencer import sequence_pending
from audit.models import AuditEvent, Verb
from lib.errors import BreakGlassRefused, PolicyInvalid, PostHocReviewRefused
from tests import factories
from tests.factories import submit, totp_code, trail_name

pytestmark = pytest.mark.django_db

RULE = {
    "people": ["reviewer_a"],
    "per_week": 3,
    "amount_cap": "500.00",
    "currency": "EUR",
    "review_hours": 24,
}


@pytest.fixture
def people(requester, reviewer_a, reviewer_b, reviewer_c, admin_user):
    return {"a": reviewer_a, "b": reviewer_b, "c": reviewer_c, "admin": admin_user, "requester": requester}


@pytest.fixture
def glass_policy(tenant, people):
    """Refunds need two finance approvals; reviewer_a may break glass up to EUR 500, three times a week."""
    return factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        thresholds=[{"group": "finance", "count": 2}],
        break_glass=RULE,
    )


def release(proposal, user, reason="the customer's card is being charged twice right now", **kwargs):
    kwargs.setdefault("step_up", step_up_for(user, totp_code(user)))
    return break_glass_release(proposal.id, user, reason=reason, digest_seen=proposal.action_digest, **kwargs)


def refusals(proposal) -> list[dict]:
    sequence_pending()
    events = AuditEvent.objects.filter(subject=f"proposal:{proposal.id}", verb=Verb.BREAK_GLASS_REFUSED)
    return [event.data for event in events.order_by("seq")]


def test_a_named_person_releases_alone_and_the_token_says_break_glass(agent, glass_policy, people):
    proposal = submit(agent)
    done = release(proposal, people["a"])
    proposal.refresh_from_db()
    assert proposal.state == State.APPROVED  # one approval of the two the quorum needs
    assert done.step_up_method == "totp" and done.amount == "40.00" and done.currency == "EUR"

    claims = jwt.decode(Decision.objects.get(proposal=proposal).token, options={"verify_signature": False})
    assert claims["decision"] == "approved"
    [approver] = claims["approvers"]
    assert approver["sub"] == trail_name("reviewer_a")
    assert approver["auth"]["method"] == "break_glass"
    assert approver["auth"]["step_up"]["method"] == "totp"
    assert approver["reason"] == "the customer's card is being charged twice right now"
    assert approver["break_glass"]["reviewers"] == [trail_name("admin"), trail_name("reviewer_b")]
    assert approver["break_glass"]["reviews_due_at"]
    assert claims["quorum"]["approved_by"] == [trail_name("reviewer_a")]
    assert claims["reason"].startswith("break-glass release by Alice: ")

    vote = Vote.objects.get(proposal=proposal)
    assert vote.auth_method == "break_glass" and vote.verdict == "approve"
    sequence_pending()
    verbs = list(
        AuditEvent.objects.filter(subject=f"proposal:{proposal.id}")
        .order_by("seq")
        .values_list("verb", flat=True)
    )
    assert Verb.BREAK_GLASS_RELEASED in verbs
    assert verbs.count(Verb.POST_HOC_REVIEW_ASSIGNED) == 2
    released = AuditEvent.objects.get(subject=f"proposal:{proposal.id}", verb=Verb.BREAK_GLASS_RELEASED)
    assert released.data["budget"] == {"used": 1, "per_week": 3}
    assert released.data["step_up"]["method"] == "totp"


def test_two_post_hoc_reviews_go_to_two_other_people_never_the_releaser_or_the_principal(
    agent, glass_policy, people
):
    proposal = submit(agent)
    done = release(proposal, people["a"])
    reviews = list(PostHocReview.objects.filter(release=done).order_by("reviewer__username"))
    assert [r.reviewer.username for r in reviews] == ["admin", "reviewer_b"]  # admins first, then reviewers
    assert all(r.due_at == done.created_at + timedelta(hours=24) for r in reviews)
    assert [r.release_id for r in open_reviews_for(people["admin"])] == [done.id]
    assert not open_reviews_for(people["a"]).exists()
    # The next release spreads the load: reviewer_c has none open, reviewer_b one.
    second = release(submit(agent), people["a"])
    assert sorted(r.reviewer.username for r in second.reviews.all()) == ["admin", "reviewer_c"]


def test_a_person_not_named_is_refused_and_it_is_recorded(agent, glass_policy, people):
    proposal = submit(agent)
    with pytest.raises(BreakGlassRefused) as refused:
        release(proposal, people["b"])
    assert refused.value.code == "not_named"
    proposal.refresh_from_db()
    assert proposal.state == State.AWAITING_REVIEW
    assert [r["code"] for r in refusals(proposal)] == ["not_named"]


def test_no_break_glass_under_the_tenant_default_or_a_policy_without_a_rule(tenant, agent, people):
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund")
    without_rule = submit(agent)
    by_default = submit(agent, action={"tool": "other.tool", "arguments": {}})
    for proposal, person in ((without_rule, people["a"]), (by_default, people["admin"])):
        with pytest.raises(BreakGlassRefused) as refused:
            release(proposal, person)
        assert refused.value.code == "not_named"


def test_over_budget_is_refused_and_recorded_and_a_week_old_release_no_longer_counts(
    agent, glass_policy, people
):
    for _ in range(3):
        release(submit(agent), people["a"])
    fourth = submit(agent)
    with pytest.raises(BreakGlassRefused) as refused:
        release(fourth, people["a"])
    assert refused.value.code == "budget_exhausted"
    assert "3 of 3" in refused.value.message
    assert refusals(fourth) == [
        {"code": "budget_exhausted", "message": refused.value.message, "used": 3, "per_week": 3}
    ]
    fourth.refresh_from_db()
    assert fourth.state == State.AWAITING_REVIEW
    # A rolling week: once the oldest release is more than 7 days old, one is free again.
    oldest = BreakGlassRelease.objects.order_by("created_at").first()
    assert oldest is not None
    BreakGlassRelease.objects.filter(pk=oldest.pk).update(
        created_at=timezone.now() - timedelta(days=7, minutes=1)
    )
    release(fourth, people["a"])
    fourth.refresh_from_db()
    assert fourth.state == State.APPROVED


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"order_id": "1", "amount": "500.01", "currency": "EUR"}, "over_cap"),
        ({"order_id": "1", "amount": "40.00", "currency": "USD"}, "currency_mismatch"),
        ({"order_id": "1", "amount": "40.00"}, "currency_mismatch"),
        ({"order_id": "1", "currency": "EUR"}, "amount_unknown"),
        ({"order_id": "1", "amount": "forty", "currency": "EUR"}, "amount_unknown"),
    ],
)
def test_the_amount_cap_holds_and_fails_closed(agent, glass_policy, people, arguments, code):
    proposal = submit(agent, action={"tool": "payments.refund", "arguments": arguments, "target": "order:1"})
    with pytest.raises(BreakGlassRefused) as refused:
        release(proposal, people["a"])
    assert refused.value.code == code
    assert [r["code"] for r in refusals(proposal)] == [code]
    assert not BreakGlassRelease.objects.exists()


def test_exactly_the_cap_is_released(agent, glass_policy, people):
    proposal = submit(agent, action=factories.refund_action(amount="500.00"))
    release(proposal, people["a"])
    proposal.refresh_from_db()
    assert proposal.state == State.APPROVED


def test_a_release_needs_a_reason_and_a_fresh_step_up(agent, glass_policy, people):
    proposal = submit(agent)
    with pytest.raises(BreakGlassRefused) as refused:
        release(proposal, people["a"], reason="  ")
    assert refused.value.code == "reason_required"
    with pytest.raises(BreakGlassRefused) as refused:
        release(proposal, people["a"], step_up=None)
    assert refused.value.code == "step_up_required"
    with pytest.raises(BreakGlassRefused) as refused:
        release(proposal, people["a"], step_up=step_up_for(people["a"], "000000"))
    assert refused.value.code == "step_up_failed"
    proposal.refresh_from_db()
    assert proposal.state == State.AWAITING_REVIEW
    assert not BreakGlassRelease.objects.exists()


def test_separation_of_duties_holds_for_a_named_principal(tenant, agent, people):
    factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        thresholds=[{"group": "finance", "count": 2}],
        break_glass={**RULE, "people": ["requester", "reviewer_a"]},
    )
    proposal = submit(agent)  # for the principal "requester"
    with pytest.raises(BreakGlassRefused) as refused:
        release(proposal, people["requester"])
    assert refused.value.code == "self_approval"


def test_a_stale_digest_or_a_closed_proposal_is_refused(agent, glass_policy, people):
    proposal = submit(agent)
    with pytest.raises(BreakGlassRefused) as refused:
        break_glass_release(
            proposal.id,
            people["a"],
            reason="urgent",
            digest_seen="sha256:0",
            step_up=step_up_for(people["a"], totp_code(people["a"])),
        )
    assert refused.value.code == "wrong_digest"
    release(proposal, people["a"])
    with pytest.raises(BreakGlassRefused) as refused:
        release(proposal, people["a"])
    assert refused.value.code == "not_open"


def test_a_review_records_agree_or_disagree_with_a_note_once_by_its_reviewer(agent, glass_policy, people):
    proposal = submit(agent)
    done = release(proposal, people["a"])
    review = PostHocReview.objects.get(release=done, reviewer=people["admin"])
    with pytest.raises(PostHocReviewRefused) as refused:
        complete_post_hoc_review(review.id, people["admin"], verdict="disagree", note=" ")
    assert refused.value.code == "note_required"
    with pytest.raises(PostHocReviewRefused) as refused:
        complete_post_hoc_review(review.id, people["c"], verdict="agree", note="fine")
    assert refused.value.code == "not_found"

    complete_post_hoc_review(
        review.id, people["admin"], verdict="disagree", note="this could have waited an hour"
    )
    review.refresh_from_db()
    assert (review.verdict, review.note) == ("disagree", "this could have waited an hour")
    assert review.done_at is not None
    assert not open_reviews_for(people["admin"]).exists()
    with pytest.raises(PostHocReviewRefused) as refused:
        complete_post_hoc_review(review.id, people["admin"], verdict="agree", note="again")
    assert refused.value.code == "already_done"
    sequence_pending()
    event = AuditEvent.objects.get(subject=f"proposal:{proposal.id}", verb=Verb.POST_HOC_REVIEW_DONE)
    assert event.actor == trail_name("admin")
    assert event.data == {"verdict": "disagree", "note": "this could have waited an hour", "late": False}


def test_overdue_reviews_are_recorded_once(agent, glass_policy, people):
    proposal = submit(agent)
    done = release(proposal, people["a"])
    complete_post_hoc_review(
        PostHocReview.objects.get(release=done, reviewer=people["admin"]).id,
        people["admin"],
        verdict="agree",
        note="the double charge was real",
    )
    assert note_overdue_reviews(done.reviews_due_at - timedelta(seconds=1)) == 0
    assert note_overdue_reviews(done.reviews_due_at + timedelta(seconds=1)) == 1
    assert note_overdue_reviews(done.reviews_due_at + timedelta(hours=1)) == 0
    sequence_pending()
    [overdue] = AuditEvent.objects.filter(verb=Verb.POST_HOC_REVIEW_OVERDUE)
    assert overdue.subject == f"proposal:{proposal.id}"
    assert overdue.data["reviewer"] == trail_name("reviewer_b")


def test_a_policy_activation_does_not_revoke_a_break_glass_release(tenant, agent, glass_policy, people):
    proposal = submit(agent)
    release(proposal, people["a"])
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 2}]
    )
    proposal.refresh_from_db()
    assert proposal.state == State.APPROVED


def test_the_rule_is_validated_like_the_other_policy_fields(tenant, people, compliance):
    author, _ = factories.policy_admins()
    target = create_policy(tenant, slug="refunds", actor=author)
    base = {"outcome": "require_approval", "thresholds": [{"group": "admins", "count": 1}]}
    bad = [
        {**RULE, "people": ["nobody"]},
        {**RULE, "people": ["compliance"]},
        {**RULE, "per_week": 0},
        {**RULE, "amount_cap": 500},
        {**RULE, "amount_cap": "-1"},
        {**RULE, "currency": "euro"},
        {**RULE, "extra": 1},
        {"people": ["reviewer_a"]},
        ["reviewer_a"],
    ]
    for rule in bad:
        with pytest.raises(PolicyInvalid) as invalid:
            create_policy_version(target, {**base, "break_glass": rule}, actor=author)
        assert "break_glass" in invalid.value.errors, rule
    stored = create_policy_version(
        target, {**base, "break_glass": {k: v for k, v in RULE.items() if k != "review_hours"}}, actor=author
    )
    assert stored.break_glass == RULE  # review_hours defaults to 24
