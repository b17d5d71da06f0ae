"""The worker's record of what it posted to Teams channels (bookkeeping of a delivery, like the outbox's
marks; the audit trail holds the proposal's own events)."""

from datetime import datetime
from typing import Any

from django.utils import timezone

from approvals.models.notifications import TeamsPost

TEAMS_ATTEMPTS = 6


def plan_teams_posts(proposal, channels) -> None:
    TeamsPost.objects.bulk_create(
        [TeamsPost(proposal=proposal, channel=channel) for channel in channels], ignore_conflicts=True
    )


def record_teams_sent(
    post: TeamsPost,
    *,
    requested: bool,
    outcome_state: str,
    next_look: datetime,
    activity_id: str = "",
    shown: str = "",
) -> None:
    """A card went out (or, `requested` False with an outcome, the request ended before its card did).
    A bot's card also records the activity it updates in place and a hash of what it shows."""
    fields: dict[str, Any] = {"attempts": 0, "next_attempt_at": next_look}
    if activity_id:
        fields.update(activity_id=activity_id, shown=shown)
    if requested:
        fields["requested_at"] = timezone.now()
    if outcome_state:
        fields.update(outcome_state=outcome_state, final=True)
    TeamsPost.objects.filter(pk=post.pk).update(**fields)


def record_teams_checked(
    post: TeamsPost, next_look: datetime, *, final: bool = False, outcome_state: str = ""
) -> None:
    """Its card shows what it should (or, `final`, the request ended and nothing more will be shown):
    nothing to send until `next_look`."""
    fields: dict[str, Any] = {"next_attempt_at": next_look}
    if final:
        fields.update(final=True, outcome_state=outcome_state)
    TeamsPost.objects.filter(pk=post.pk).update(**fields)


def record_teams_failure(post: TeamsPost, retry_at: datetime) -> None:
    attempts = post.attempts + 1
    TeamsPost.objects.filter(pk=post.pk).update(
        attempts=attempts, next_attempt_at=retry_at, final=attempts >= TEAMS_ATTEMPTS
    )
