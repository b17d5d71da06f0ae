"""Budgeted break-glass: an emergency release by one named person, and the two post-hoc reviews it owes.

The rule a policy version carries and how it applies to a proposal are in approvals/policy/break_glass.py.
A release is a vote with `auth_method = "break_glass"` that approves the proposal at once, whatever the
quorum: the person must be named by every pinned version's rule and otherwise eligible (the vote
checks: open, not expired, the digest they saw, not the principal, not the edit's author, in a group
this proposal needs, not voted yet), give a reason and the same fresh step-up as a vote, and stay
within the weekly budget (counted under a lock on their tenant membership row, so concurrent releases
cannot overrun it) and the amount cap. Each release assigns two post-hoc reviews to other people.
"""

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from accounts.stepup import StepUp
from approvals import events
from approvals.models import BreakGlassRelease, Decision, PostHocReview, Proposal, Vote
from approvals.policy import break_glass
from approvals.selectors import VoterSlots, lock_proposal_with_role
from approvals.services.batches import break_glass_allowed
from approvals.services.common import proposal_subject
from approvals.services.decisions import issue_decision
from approvals.services.lifecycle import expire_proposal, transition
from approvals.services.quorum import count_quorum
from approvals.services.votes import refusal_to_vote
from approvals.services.votes.step_up import check_step_up
from approvals.states import State
from audit.labels import SYSTEM, actor_label, user_label
from audit.models import Verb
from audit.people import read_pseudonyms
from audit.trail import audit_time, record
from lib.errors import BreakGlassRefused, PostHocReviewRefused
from tenants.models import TenantMembership
from tenants.queries import DECIDING_ROLES

AUTH_METHOD = "break_glass"
WEEK = timedelta(days=break_glass.WEEK_DAYS)


def rule_for_proposal(proposal: Proposal) -> break_glass.Rule | None:
    return break_glass.rule_for(proposal.requirements, proposal.policy_versions.select_related("policy"))


def releases_this_week(tenant_id, user, now: datetime | None = None):
    """The person's break-glass releases in the tenant over the rolling week that ends now."""
    since = (now or timezone.now()) - WEEK
    return BreakGlassRelease.objects.filter(tenant_id=tenant_id, releaser=user, created_at__gt=since)


def break_glass_release(
    proposal_id,
    actor,
    *,
    reason: str,
    digest_seen: str,
    step_up: StepUp | None = None,
    page_hash: str = "",
    now: datetime | None = None,
) -> BreakGlassRelease:
    """Release a proposal on one named person's authority in an emergency. Refusals raise
    BreakGlassRefused (or VoteRefused-coded refusals for the vote's own checks, NotFound for outsiders);
    a refusal that must leave a trace (not named, over budget or cap, a failed step-up) is recorded and
    committed first."""
    reason = (reason or "").strip()[:2000]
    if not reason:
        raise BreakGlassRefused("reason_required", "a break-glass release needs a reason", "reason")
    refusal: BreakGlassRefused | None = None
    with transaction.atomic(durable=True):
        proposal, role = lock_proposal_with_role(proposal_id, actor)
        clock = now or timezone.now()
        slots = VoterSlots(proposal, actor, role=role)  # read once for the checks and the release
        refusal, rule = _refusal(proposal, actor, digest_seen, clock, slots)
        step = None
        if refusal is None:
            step, vote_refusal = check_step_up(proposal, actor, step_up, "break-glass release")
            if vote_refusal is not None:
                refusal = BreakGlassRefused(vote_refusal.code, vote_refusal.message, vote_refusal.field)
        if refusal is None:
            # The budget is counted under a lock on the person's membership row: two releases by one
            # person queue here (after each locked its own proposal), and the second counts the first.
            TenantMembership.objects.select_for_update().filter(
                tenant_id=proposal.tenant_id, user=actor
            ).first()
            used = releases_this_week(proposal.tenant_id, actor, clock).count()
            reviewers = choose_reviewers(proposal, actor)
            if used >= rule.per_week:
                refusal = _refused(
                    proposal,
                    actor,
                    "budget_exhausted",
                    f"your break-glass budget is used up: {used} of {rule.per_week} in the last 7 days",
                    used=used,
                    per_week=rule.per_week,
                )
            elif len(reviewers) < break_glass.REVIEWS_PER_RELEASE:
                refusal = _refused(
                    proposal,
                    actor,
                    "no_reviewers",
                    "break-glass needs two other people of this tenant to review it afterwards; "
                    "there are not enough",
                )
            else:
                release = _release(
                    proposal, actor, slots, rule, reason, step, reviewers, used, page_hash, clock
                )
    if refusal is not None:
        raise refusal
    return release


def _refusal(proposal: Proposal, actor, digest_seen: str, clock: datetime, slots: VoterSlots):
    """(refusal, rule): the vote's own checks first, then the rule's (named, amount and cap)."""
    # A batch member is released alone only where its batch's policy says so (`batch.break_glass`).
    alone = bool(proposal.manifest_digest) and break_glass_allowed(proposal)
    vote_refusal = refusal_to_vote(proposal, actor, digest_seen, clock, slots=slots, batch_vote=alone)
    if vote_refusal is not None:
        if vote_refusal.code == "expired":
            expire_proposal(
                proposal, reason="a break-glass release arrived after expiry: silence never approves"
            )
        return _refused(proposal, actor, vote_refusal.code, vote_refusal.message), None
    rule = rule_for_proposal(proposal)
    if rule is None or not rule.names(actor):
        return _refused(
            proposal, actor, "not_named", "break-glass is not open to you on this proposal's policy"
        ), None
    amount = break_glass.amount_refusal(rule, proposal.action.get("arguments") or {})
    if amount is not None:
        return _refused(proposal, actor, *amount), None
    return None, rule


def _refused(proposal: Proposal, actor, code: str, message: str, **data) -> BreakGlassRefused:
    record(
        proposal.tenant_id,
        actor=actor_label(actor),
        verb=Verb.BREAK_GLASS_REFUSED,
        subject=proposal_subject(proposal),
        data={"code": code, "message": message, **data},
    )
    return BreakGlassRefused(code, message)


def choose_reviewers(proposal: Proposal, releaser) -> list:
    """The two people who review a release afterwards: the tenant's admins first, then its reviewers,
    each time those with the fewest open post-hoc reviews first (then by username). Never the releaser,
    the person the action is for, or the author of an edit. One query."""
    excluded = Q(user=releaser)
    if proposal.edited_by_id:
        excluded |= Q(user_id=proposal.edited_by_id)
    if proposal.principal_id:
        excluded |= Q(principal_id=proposal.principal_id)
    candidates = (
        TenantMembership.objects.filter(tenant_id=proposal.tenant_id, role__in=DECIDING_ROLES)
        .exclude(excluded)
        .select_related("user")
        .annotate(
            open_reviews=Count(
                "user__post_hoc_reviews",
                filter=Q(user__post_hoc_reviews__done_at__isnull=True),
            )
        )
        .filter(user__is_active=True)
    )
    ordered = sorted(
        candidates,
        key=lambda m: (m.role != TenantMembership.Role.ADMIN, m.open_reviews, m.user.get_username()),
    )
    return [membership.user for membership in ordered[: break_glass.REVIEWS_PER_RELEASE]]


def _release(
    proposal, actor, slots, rule, reason, step, reviewers, used, page_hash, clock
) -> BreakGlassRelease:
    step_method, step_at = step
    groups = slots.own_groups()
    amount, currency = break_glass.amount_of(proposal.action.get("arguments") or {})
    due = clock + timedelta(hours=rule.review_hours)
    Vote.objects.create(
        proposal=proposal,
        voter=actor,
        verdict=Vote.Verdict.APPROVE,
        digest_seen=proposal.action_digest,
        page_hash=page_hash,
        reason=reason,
        auth_method=AUTH_METHOD,
        auth_at=clock,
        group=groups[0] if len(groups) == 1 else None,
    )
    release = BreakGlassRelease.objects.create(
        proposal=proposal,
        tenant_id=proposal.tenant_id,
        releaser=actor,
        reason=reason,
        step_up_method=step_method,
        step_up_at=step_at,
        amount=amount,
        currency=currency,
        reviews_due_at=due,
        created_at=clock,
    )
    read_pseudonyms(reviewers)
    subs = [user_label(person) for person in reviewers]
    record(
        proposal.tenant_id,
        actor=actor_label(actor),
        verb=Verb.BREAK_GLASS_RELEASED,
        subject=proposal_subject(proposal),
        data={
            "reason": reason,
            "digest_seen": proposal.action_digest,
            "page_hash": page_hash,
            "amount": amount,
            "currency": currency,
            "auth": {"method": AUTH_METHOD, "at": audit_time(clock)},
            "step_up": {"method": step_method, "at": audit_time(step_at)},
            "budget": {"used": used + 1, "per_week": rule.per_week},
            "rule": list(rule.versions),
            "reviewers": subs,
            "reviews_due_at": audit_time(due),
        },
    )
    for person in reviewers:
        PostHocReview.objects.create(
            release=release, tenant_id=proposal.tenant_id, reviewer=person, due_at=due
        )
        record(
            proposal.tenant_id,
            actor=SYSTEM,
            verb=Verb.POST_HOC_REVIEW_ASSIGNED,
            subject=proposal_subject(proposal),
            data={"reviewer": user_label(person), "due_at": audit_time(due)},
        )
    approver = {
        "sub": user_label(actor),
        "name": actor.get_full_name() or actor.get_username(),
        "group": groups[0].slug if len(groups) == 1 else None,
        # The one release that did not wait for the quorum says so where agents read how people signed.
        "auth": {
            "method": AUTH_METHOD,
            "at": audit_time(clock),
            "step_up": {"method": step_method, "at": audit_time(step_at)},
        },
        "reason": reason,
        "reservation": "",
        "break_glass": {"reviewers": subs, "reviews_due_at": audit_time(due)},
    }
    transition(
        proposal,
        State.APPROVED,
        actor=actor_label(actor),
        reason="break-glass release",
        data={"approved_by": [approver["sub"]], "break_glass": True},
    )
    issue_decision(
        proposal,
        Decision.Kind.APPROVED,
        reason=f"break-glass release by {approver['name']}: {reason}",
        approvers=[approver],
        quorum=count_quorum(proposal, groups=slots.groups),
    )
    return release


def complete_post_hoc_review(
    review_id, actor, *, verdict: str, note: str, now: datetime | None = None
) -> PostHocReview:
    """The assigned reviewer agrees or disagrees with a break-glass release, with a note. Once."""
    if verdict not in PostHocReview.Verdict.values:
        raise PostHocReviewRefused("bad_verdict", "a post-hoc review agrees or disagrees", "verdict")
    note = (note or "").strip()[:2000]
    if not note:
        raise PostHocReviewRefused("note_required", "write a note: what you checked and found", "note")
    clock = now or timezone.now()
    with transaction.atomic(durable=True):
        review = (
            PostHocReview.objects.select_for_update(of=("self",))
            .select_related("release__proposal")
            .filter(pk=review_id, reviewer=actor)
            .first()
        )
        if review is None:
            raise PostHocReviewRefused("not_found", "no such post-hoc review of yours")
        if review.done_at is not None:
            raise PostHocReviewRefused("already_done", "you already reviewed this release")
        review.verdict, review.note, review.done_at = verdict, note, clock
        review.save(update_fields=["verdict", "note", "done_at"])
        proposal = review.release.proposal
        record(
            review.tenant_id,
            actor=actor_label(actor),
            verb=Verb.POST_HOC_REVIEW_DONE,
            subject=proposal_subject(proposal),
            data={"verdict": verdict, "note": note, "late": clock > review.due_at},
        )
        events.proposal_changed(proposal)
    return review


def note_overdue_reviews(now: datetime | None = None, *, limit: int = 500) -> int:
    """Record once each post-hoc review that passed its deadline undone (the worker calls this)."""
    clock = now or timezone.now()
    noted = 0
    with transaction.atomic(durable=True):
        due = (
            PostHocReview.objects.select_for_update(of=("self",), skip_locked=_skip_locked())
            .filter(done_at__isnull=True, overdue_noted_at__isnull=True, due_at__lte=clock)
            .select_related("release", "reviewer")
            .order_by("due_at", "pk")[:limit]
        )
        for review in due:
            review.overdue_noted_at = clock
            review.save(update_fields=["overdue_noted_at"])
            record(
                review.tenant_id,
                actor=SYSTEM,
                verb=Verb.POST_HOC_REVIEW_OVERDUE,
                subject=f"proposal:{review.release.proposal_id}",
                data={
                    "reviewer": user_label(review.reviewer),
                    "due_at": audit_time(review.due_at),
                },
            )
            noted += 1
    return noted


def _skip_locked() -> bool:
    return bool(transaction.get_connection().features.has_select_for_update_skip_locked)


def open_reviews_for(user):
    """The person's post-hoc reviews still to do, the earliest deadline first (one query)."""
    return (
        PostHocReview.objects.filter(reviewer=user, done_at__isnull=True)
        .select_related("release__proposal__agent", "release__releaser")
        .order_by("due_at", "pk")
    )
