"""What the pages show of break-glass (policy/break_glass.py, services/break_glass.py): the control on
the proposal page, the record of a release and its reviews, the post-hoc reviews in a person's queue,
and the oversight page for tenant admins (overdue reviews, exhausted budgets). Read only."""

from collections import defaultdict

from django.db.models import Count, Min, Prefetch
from django.utils import timezone

from approvals.models import BreakGlassRelease, PolicyVersion, PostHocReview, Proposal
from approvals.policy import break_glass
from approvals.services.break_glass import WEEK, open_reviews_for, releases_this_week, rule_for_proposal
from approvals.states import OPEN_FOR_VOTES
from approvals.web.forms import BreakGlassForm, PostHocReviewForm
from tenants.models import TenantMembership
from tenants.queries import memberships_of

OVERSIGHT_RECENT = 50

# panel()'s `rule` when the caller has not read the proposal's break-glass rule yet.
READ_RULE = object()


def panel(
    proposal: Proposal,
    user,
    mode: str,
    form: BreakGlassForm | None = None,
    rule=READ_RULE,
    missing: int | None = None,
) -> dict | None:
    """The "Break glass" control for a named person who could vote now; None for everyone else (but a
    refused attempt still shows why: {"refused": [messages]}). `missing`: the approvals still needed;
    where it is one, this person's own approval releases it, so break glass is not offered: it would
    only add a post-hoc review and spend the budget for what one ordinary vote does."""
    if mode != "vote" or (missing is not None and missing <= 1):
        rule = None
    elif rule is READ_RULE:
        rule = rule_for_proposal(proposal)
    if rule is None or not rule.names(user) or proposal.state not in OPEN_FOR_VOTES:
        if form is not None and form.errors:
            return {"refused": [message for messages in form.errors.values() for message in messages]}
        return None
    now = timezone.now()
    week = releases_this_week(proposal.tenant_id, user, now)
    summary = week.aggregate(used=Count("pk"), oldest=Min("created_at"))
    used = summary["used"]
    left = max(rule.per_week - used, 0)
    amount = break_glass.amount_refusal(rule, proposal.action.get("arguments") or {})
    return {
        "rule": rule,
        "per_week": rule.per_week,
        "used": used,
        "left": left,
        "frees_at": summary["oldest"] + WEEK if not left and summary["oldest"] else None,
        "cap": rule.cap_text(),
        "review_hours": rule.review_hours,
        "blocked": amount[1] if amount else "",
        "form": form or BreakGlassForm(initial={"digest": proposal.action_digest}),
        "now": now,
    }


# my_review()'s `record` when the caller has not read the proposal's release.
READ_RECORD = object()


def release_record(proposal: Proposal) -> BreakGlassRelease | None:
    """The break-glass release of this proposal with its reviews and their reviewers (two queries)."""
    return (
        BreakGlassRelease.objects.filter(proposal=proposal)
        .select_related("releaser")
        .prefetch_related(
            Prefetch("reviews", queryset=PostHocReview.objects.select_related("reviewer").order_by("pk"))
        )
        .first()
    )


def my_review(
    proposal: Proposal, user, form: PostHocReviewForm | None = None, record=READ_RECORD
) -> dict | None:
    """This person's post-hoc review of this proposal's release, if one is assigned to them. `record`:
    what release_record() read for the proposal (its release, with its reviews and their reviewers),
    when the caller has it: the review is taken from there, no query (one release per proposal, one
    review per person)."""
    if record is READ_RECORD:
        review = (
            PostHocReview.objects.filter(release__proposal=proposal, reviewer=user)
            .select_related("release__releaser")
            .first()
        )
    else:
        reviews = record.reviews.all() if record is not None else []
        review = next((review for review in reviews if review.reviewer_id == user.pk), None)
    if review is None:
        return None
    return {
        "review": review,
        "overdue": review.done_at is None and timezone.now() >= review.due_at,
        "form": form or PostHocReviewForm(initial={"review": review.pk}),
    }


def queue_reviews(user) -> list[dict]:
    """The person's post-hoc reviews still to do, for their queue (two queries, whatever their number;
    one when there are none)."""
    reviews = open_reviews_for(user)
    # Almost everyone owes none: a bare look first, since the read with its joined rows costs several
    # times more to build than to run (about 1.3 ms of CPU for an empty answer).
    if not reviews.exists():
        return []
    now = timezone.now()
    return [
        {"review": review, "overdue": now >= review.due_at}
        for review in reviews.select_related("release__proposal__tenant")[:100]
    ]


def admin_tenants(user) -> list:
    return [
        membership.tenant
        for membership in memberships_of(user, {TenantMembership.Role.ADMIN})
        .select_related("tenant")
        .order_by("tenant__name")
    ]


def oversight_context(user) -> dict:
    """For a tenant admin: overdue and open post-hoc reviews, each named person's weekly budget (used up
    ones first), and the recent releases. A fixed number of queries, whatever the numbers."""
    tenants = admin_tenants(user)
    ids = [tenant.id for tenant in tenants]
    now = timezone.now()
    open_reviews = list(
        PostHocReview.objects.filter(tenant_id__in=ids, done_at__isnull=True)
        .select_related("reviewer", "release__proposal", "release__releaser", "tenant")
        .order_by("due_at", "pk")[:200]
    )
    since = now - WEEK
    used = defaultdict(int)
    for tenant_id, username, count in (
        BreakGlassRelease.objects.filter(tenant_id__in=ids, created_at__gt=since)
        .values_list("tenant_id", "releaser__username")
        .annotate(n=Count("pk"))
        .values_list("tenant_id", "releaser__username", "n")
    ):
        used[(tenant_id, username)] = count
    budgets = []
    for version in PolicyVersion.objects.filter(
        policy__tenant_id__in=ids, status=PolicyVersion.Status.ACTIVE
    ).select_related("policy__tenant"):
        rule = version.break_glass
        if not rule:
            continue
        for person in rule["people"]:
            spent = used[(version.policy.tenant_id, person)]
            budgets.append(
                {
                    "tenant": version.policy.tenant,
                    "version": version,
                    "person": person,
                    "used": spent,
                    "per_week": rule["per_week"],
                    "exhausted": spent >= rule["per_week"],
                    "cap": f"{rule['currency']} {rule['amount_cap']}",
                }
            )
    budgets.sort(key=lambda b: (not b["exhausted"], b["tenant"].name, b["person"], b["version"].policy.slug))
    recent = list(
        BreakGlassRelease.objects.filter(tenant_id__in=ids)
        .select_related("proposal", "releaser", "tenant")
        .prefetch_related(
            Prefetch("reviews", queryset=PostHocReview.objects.select_related("reviewer").order_by("pk"))
        )
        .order_by("-created_at", "-pk")[:OVERSIGHT_RECENT]
    )
    overdue = [review for review in open_reviews if review.due_at <= now]
    return {
        "tenants": tenants,
        "overdue": overdue,
        "pending": [review for review in open_reviews if review.due_at > now],
        "budgets": budgets,
        "exhausted": [b for b in budgets if b["exhausted"]],
        "recent": recent,
        "now": now,
        "week_start": since,
    }
