"""Emails to the reviewers who can decide a proposal that just started waiting for review.

services/intake.py calls `notify_eligible_reviewers` after the intake commits. An email carries a link
and enough to judge urgency, never a secret: no token, no digest, no code. Who is eligible is decided by
services.ineligibility(), the same check a vote goes through.
"""

import re

from django.conf import settings
from django.core.mail import EmailMultiAlternatives, get_connection
from django.template.loader import render_to_string
from django.urls import reverse

from approvals import services
from approvals.models import Proposal, TenantMembership
from approvals.states import State

SUBJECT_SUMMARY_CAP = 100


def eligible_reviewers(proposal: Proposal) -> list:
    """People with an email address who could vote on this proposal now."""
    groups = services.threshold_groups(proposal)
    candidates = (
        TenantMembership.objects.filter(
            tenant_id=proposal.tenant_id, user__is_active=True, user__approver_groups__in=groups.values()
        )
        .exclude(role=TenantMembership.Role.COMPLIANCE)
        .exclude(user__email="")
        .select_related("user")
        .distinct()
        .order_by("user__username")
    )
    return [m.user for m in candidates if services.ineligibility(proposal, m.user) is None]


def _one_line(text: str, limit: int) -> str:
    """Agent text in a header: one line (a newline there would be header injection), capped."""
    line = re.sub(r"[\r\n\t\x00-\x1f\x7f]+", " ", text).strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def notify_eligible_reviewers(proposal_id) -> int:
    """Email every eligible reviewer a link to the proposal. Returns how many emails were sent."""
    proposal = Proposal.objects.select_related("agent", "tenant").filter(pk=proposal_id).first()
    if proposal is None or proposal.state != State.AWAITING_REVIEW:
        return 0
    link = settings.REVIEWER_ISSUER + reverse("approvals:detail", kwargs={"proposal_id": proposal.id})
    messages = []
    for user in eligible_reviewers(proposal):
        context = {
            "proposal": proposal,
            "link": link,
            "name": user.get_full_name() or user.get_username(),
            "summary": _one_line(proposal.summary, SUBJECT_SUMMARY_CAP),
        }
        subject = _one_line(render_to_string("emails/proposal_needs_review_subject.txt", context), 200)
        message = EmailMultiAlternatives(
            subject,
            render_to_string("emails/proposal_needs_review.txt", context),
            settings.DEFAULT_FROM_EMAIL,
            [user.email],
        )
        message.attach_alternative(
            render_to_string("emails/proposal_needs_review.html", context), "text/html"
        )
        messages.append(message)
    if not messages:
        return 0
    return get_connection().send_messages(messages) or 0
