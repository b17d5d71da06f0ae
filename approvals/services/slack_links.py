"""Slack: linking a Slack user to a Reviewer person, the replay guard of signed requests, and the worker's
record of what it posted. A Slack user decides nothing until the person confirmed the link in Reviewer
(signed in with their own factor): the link is one-time, expires, and is bound to the Slack user it
was offered to.
"""

import hashlib
import secrets
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from approvals.models.notifications import (
    SlackIdentity,
    SlackLinkRequest,
    SlackPost,
    SlackRequestSeen,
    SlackWorkspace,
)
from audit.labels import SYSTEM, actor_label
from audit.models import Verb
from audit.trail import record
from lib.errors import ActionRefused

LINK_SECONDS = 15 * 60
# Slack signs a timestamp and refuses nothing older than five minutes; a signature seen is kept longer.
REPLAY_WINDOW_SECONDS = 6 * 60
# A post that keeps failing is retried with backoff, then left (the page and e-mail still tell people).
POST_ATTEMPTS = 6


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def offer_link(workspace: SlackWorkspace, slack_user_id: str) -> str:
    """A one-time link token for this Slack user (the caller shows the link in Slack)."""
    token = secrets.token_urlsafe(24)
    SlackLinkRequest.objects.create(
        workspace=workspace,
        slack_user_id=slack_user_id,
        token_hash=_hash(token),
        expires_at=timezone.now() + timedelta(seconds=LINK_SECONDS),
    )
    return token


def pending_link(token: str) -> SlackLinkRequest | None:
    offer = SlackLinkRequest.objects.select_related("workspace").filter(token_hash=_hash(token or "")).first()
    if offer is None or offer.used_at is not None or offer.expires_at <= timezone.now():
        return None
    return offer


def confirm_link(token: str, *, actor) -> SlackIdentity:
    """The signed-in person takes the Slack user the link was offered to. Refused if the link is used,
    expired or unknown, if the person is not a member of the workspace's tenant, or if either side is
    already linked to someone else."""
    with transaction.atomic(durable=True):
        offer = SlackLinkRequest.objects.select_for_update().filter(token_hash=_hash(token or "")).first()
        if offer is None or offer.used_at is not None or offer.expires_at <= timezone.now():
            raise ActionRefused(
                "link_invalid", "this link is used, expired or unknown: ask Slack for a new one"
            )
        workspace = offer.workspace
        if not workspace.tenant.memberships.filter(user=actor).exists():
            raise ActionRefused(
                "not_member", "you are not a member of the tenant this Slack workspace serves"
            )
        offer.used_at = timezone.now()
        offer.save(update_fields=["used_at"])
        try:
            with transaction.atomic():
                identity = SlackIdentity.objects.create(
                    workspace=workspace,
                    slack_user_id=offer.slack_user_id,
                    user=actor,
                    linked_at=offer.used_at,
                )
        except IntegrityError:
            raise ActionRefused(
                "already_linked", "this Slack user or your Reviewer account is already linked to someone else"
            ) from None
        record(
            workspace.tenant_id,
            actor=actor_label(actor),
            verb=Verb.SLACK_LINKED,
            subject=f"slack:{workspace.team_id}/{offer.slack_user_id}",
            data={"team_id": workspace.team_id, "slack_user_id": offer.slack_user_id},
        )
    return identity


def note_refused_request(workspace: SlackWorkspace | None, code: str, detail: dict | None = None) -> None:
    """A Slack request refused (bad or missing signature, replay, a decision chat may not take)."""
    with transaction.atomic(durable=True):
        record(
            workspace.tenant_id if workspace else None,
            actor=SYSTEM,
            verb=Verb.SLACK_REQUEST_REFUSED,
            subject=f"slack:{workspace.team_id}" if workspace else "slack:unknown",
            data={"code": code, **(detail or {})},
        )


def first_sight(signature: str, now: datetime | None = None) -> bool:
    """True the first time a (verified) signature is seen; False for a replay."""
    now = now or timezone.now()
    try:
        with transaction.atomic(durable=True):
            SlackRequestSeen.objects.create(signature=signature[:100], at=now)
    except IntegrityError:
        return False
    return True


def forget_old_signatures(now: datetime | None = None) -> int:
    now = now or timezone.now()
    deleted, _ = SlackRequestSeen.objects.filter(
        at__lt=now - timedelta(seconds=REPLAY_WINDOW_SECONDS)
    ).delete()
    return deleted


# --- the worker's record of its posts ------------------------------------------------------------


def plan_posts(proposal, workspace: SlackWorkspace, channels: list[str]) -> None:
    SlackPost.objects.bulk_create(
        [SlackPost(proposal=proposal, workspace=workspace, channel=channel) for channel in channels],
        ignore_conflicts=True,
    )


def record_posted(
    post: SlackPost, *, channel: str, ts: str, shown: str, final: bool, next_look: datetime
) -> None:
    SlackPost.objects.filter(pk=post.pk).update(
        posted_channel=channel,
        ts=ts,
        shown=shown,
        final=final,
        attempts=0,
        last_error="",
        next_attempt_at=next_look,
    )


def record_checked(post: SlackPost, *, final: bool, next_look: datetime) -> None:
    """The message already shows what it should: nothing sent, looked at again at `next_look`."""
    SlackPost.objects.filter(pk=post.pk).update(final=final, next_attempt_at=next_look)


def record_post_failure(post: SlackPost, error: str, now: datetime | None = None) -> None:
    now = now or timezone.now()
    attempts = post.attempts + 1
    SlackPost.objects.filter(pk=post.pk).update(
        attempts=attempts,
        last_error=error[:200],
        next_attempt_at=now + timedelta(seconds=min(2**attempts * 5, 600)),
        final=attempts >= POST_ATTEMPTS,
    )
