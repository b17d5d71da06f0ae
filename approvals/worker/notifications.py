"""E-mail digests to the reviewers who can decide proposals that wait for review.

No mail leaves inside a request. Intake writes one ReviewNotice (no user: "announce this proposal") in
its own transaction (one INSERT, services/intake.py); the worker calls `send_digests` every tick, which

1. fans each announcement out to one notice per eligible reviewer (selectors.ineligibility(), the same
   check a vote goes through), and
2. sends each reviewer ONE mail listing their unsent notices, at most every NOTIFICATION_DIGEST_SECONDS
   (a minute): ten proposals in a minute make one mail, not ten. A proposal that stopped waiting before
   its digest left is dropped from it.

A mail carries links and enough to judge urgency, never a secret: no token, no digest, no code. Rows are
claimed with SKIP LOCKED on PostgreSQL, so several workers never mail the same notice; a mail server
outage rolls the claim back and the next tick tries again.
"""

import logging
import re
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import EmailMultiAlternatives, get_connection
from django.db import connection, transaction
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from approvals.models import Proposal, ReviewNotice
from approvals.notify.common import headline_of
from approvals.selectors import ineligibility, ineligibility_from
from approvals.states import OPEN_FOR_VOTES
from tenants.models import TenantMembership

log = logging.getLogger(__name__)

SUBJECT_SUMMARY_CAP = 100
# Announcements fanned out and reviewers mailed per tick at most, so one tick stays short.
FAN_OUT_BATCH = 200
DIGEST_BATCH = 50
# A digest lists this many proposals at most; the rest wait for the next one (the queue has them all).
DIGEST_MAX_ITEMS = 50


class EligibleReviewers:
    """Who could vote on each proposal of a fan-out batch, with an email address: the members of its
    threshold groups, read once per tenant and set of groups (proposals of one policy share them), less
    those the vote's own rule refuses (selectors.ineligibility_from: compliance staff, the principal, the
    edit's author). A member of a group needs no stand-in or delegation to be in one, so nothing more is
    read per person or proposal."""

    def __init__(self):
        self._members: dict[tuple, list[TenantMembership]] = {}

    def of(self, proposal: Proposal) -> list:
        slugs = tuple(sorted({t["group"] for t in proposal.requirements.get("thresholds", [])}))
        key = (proposal.tenant_id, slugs)
        if key not in self._members:
            self._members[key] = list(
                TenantMembership.objects.filter(
                    tenant_id=proposal.tenant_id,
                    user__is_active=True,
                    user__approver_groups__tenant_id=proposal.tenant_id,
                    user__approver_groups__slug__in=slugs,
                )
                .exclude(user__email="")
                .select_related("user")
                .distinct()
                .order_by("user__username")
            )
        return [m.user for m in self._members[key] if _may_vote(proposal, m)]


def _may_vote(proposal: Proposal, membership: TenantMembership) -> bool:
    why_not = ineligibility_from(
        proposal,
        membership.user_id,
        membership.role,
        is_principal=lambda: membership.principal_id == proposal.principal_id,  # selectors.is_principal
        in_a_group=lambda: True,  # a member of one of its groups
    )
    return why_not is None


def send_digests(now: datetime | None = None) -> int:
    """The worker's step: fan out new announcements, then mail the reviewers who are due. Returns how
    many mails were sent."""
    now = now or timezone.now()
    _fan_out()
    sent = 0
    for user_id in _reviewers_due(now):
        try:
            sent += _send_digest(user_id, now)
        except Exception:  # one reviewer's bad address must not stop the others' digests
            log.exception("could not send the review digest of user %s", user_id)
    return sent


def _claim(queryset):
    """Lock rows for this worker; another worker skips them (PostgreSQL). SQLite writes one at a time."""
    if connection.features.has_select_for_update_skip_locked:
        return queryset.select_for_update(skip_locked=True)
    return queryset


def _fan_out() -> None:
    with transaction.atomic():
        announcements = list(
            _claim(ReviewNotice.objects.filter(user=None).select_related("proposal").order_by("id"))[
                :FAN_OUT_BATCH
            ]
        )
        reviewers = EligibleReviewers()
        notices = [
            ReviewNotice(proposal=announcement.proposal, user=user)
            for announcement in announcements
            if announcement.proposal.state in OPEN_FOR_VOTES
            for user in reviewers.of(announcement.proposal)
        ]
        ReviewNotice.objects.bulk_create(notices, ignore_conflicts=True)
        ReviewNotice.objects.filter(pk__in=[a.pk for a in announcements]).delete()


def _reviewers_due(now: datetime) -> list[int]:
    """Reviewers with unsent notices who were not mailed in the last NOTIFICATION_DIGEST_SECONDS."""
    recently = now - timedelta(seconds=settings.NOTIFICATION_DIGEST_SECONDS)
    mailed_recently = ReviewNotice.objects.filter(user__isnull=False, sent_at__gt=recently).values("user")
    return list(
        ReviewNotice.objects.filter(user__isnull=False, sent_at=None)
        .exclude(user__in=mailed_recently)
        .values_list("user", flat=True)
        .distinct()
        .order_by("user")[:DIGEST_BATCH]
    )


def _send_digest(user_id: int, now: datetime) -> int:
    with transaction.atomic():
        notices = list(
            _claim(
                ReviewNotice.objects.filter(user_id=user_id, sent_at=None)
                .select_related("user", "proposal__agent", "proposal__tenant")
                .order_by("proposal__expires_at", "id")
            )[:DIGEST_MAX_ITEMS]
        )
        if not notices:
            return 0  # another worker took them
        user = notices[0].user
        still_waiting = [
            n.proposal
            for n in notices
            if n.proposal.state in OPEN_FOR_VOTES
            and n.proposal.expires_at > now
            and ineligibility(n.proposal, user) is None
        ]
        ReviewNotice.objects.filter(pk__in=[n.pk for n in notices]).update(sent_at=now)
        if not still_waiting or not user.email or not user.is_active:
            return 0
        # Sent inside the claim: if the mail server refuses, the rows stay unsent for the next tick.
        return get_connection().send_messages([_digest_message(user, still_waiting)]) or 0


def _one_line(text: str, limit: int) -> str:
    """Agent text in a header: one line (a newline there would be header injection), capped."""
    line = re.sub(r"[\r\n\t\x00-\x1f\x7f]+", " ", text).strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _digest_message(user, proposals: list[Proposal]) -> EmailMultiAlternatives:
    items = [
        {
            "proposal": proposal,
            # Reviewer's headline, as the page and the chat messages state it (currency, target spelling).
            "headline": headline_of(proposal),
            "link": settings.REVIEWER_ISSUER
            + reverse("approvals:detail", kwargs={"proposal_id": proposal.id}),
        }
        for proposal in proposals
    ]
    context = {
        "items": items,
        "name": user.get_full_name() or user.get_username(),
        "summary": _one_line(proposals[0].summary, SUBJECT_SUMMARY_CAP),
        "queue_link": settings.REVIEWER_ISSUER + reverse("approvals:queue"),
    }
    subject = _one_line(render_to_string("emails/review_digest_subject.txt", context), 200)
    message = EmailMultiAlternatives(
        subject,
        render_to_string("emails/review_digest.txt", context),
        settings.DEFAULT_FROM_EMAIL,
        [user.email],
    )
    message.attach_alternative(render_to_string("emails/review_digest.html", context), "text/html")
    return message
