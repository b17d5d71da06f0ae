"""Teams: linking a Teams user (their Entra object id) to a Reviewer person, and the record of a request
from Teams that was refused. As for Slack (approvals/services/slack_links.py): a Teams user decides
nothing until the person confirmed the link in Reviewer, signed in with their own factor; the link is
one-time, expires, and is bound to the Teams user it was offered to."""

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from approvals.models.notifications import TeamsBot, TeamsIdentity, TeamsLinkRequest
from audit.labels import SYSTEM, actor_label
from audit.models import Verb
from audit.trail import record
from lib.errors import ActionRefused

LINK_SECONDS = 15 * 60


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def offer_teams_link(bot: TeamsBot, aad_object_id: str) -> str:
    """A one-time link token for this Teams user (the caller shows the link in Teams)."""
    token = secrets.token_urlsafe(24)
    TeamsLinkRequest.objects.create(
        bot=bot,
        aad_object_id=aad_object_id,
        token_hash=_hash(token),
        expires_at=timezone.now() + timedelta(seconds=LINK_SECONDS),
    )
    return token


def pending_teams_link(token: str) -> TeamsLinkRequest | None:
    offer = TeamsLinkRequest.objects.select_related("bot").filter(token_hash=_hash(token or "")).first()
    if offer is None or offer.used_at is not None or offer.expires_at <= timezone.now():
        return None
    return offer


def confirm_teams_link(token: str, *, actor: Any) -> TeamsIdentity:
    """The signed-in person takes the Teams user the link was offered to. Refused if the link is used,
    expired or unknown, if the person is not a member of the bot's tenant, or if either side is already
    linked to someone else."""
    with transaction.atomic(durable=True):
        offer = TeamsLinkRequest.objects.select_for_update().filter(token_hash=_hash(token or "")).first()
        if offer is None or offer.used_at is not None or offer.expires_at <= timezone.now():
            raise ActionRefused(
                "link_invalid", "this link is used, expired or unknown: ask Teams for a new one"
            )
        bot = offer.bot
        if not bot.tenant.memberships.filter(user=actor).exists():
            raise ActionRefused("not_member", "you are not a member of the tenant this Teams bot serves")
        offer.used_at = timezone.now()
        offer.save(update_fields=["used_at"])
        try:
            with transaction.atomic():
                identity = TeamsIdentity.objects.create(
                    bot=bot, aad_object_id=offer.aad_object_id, user=actor, linked_at=offer.used_at
                )
        except IntegrityError:
            raise ActionRefused(
                "already_linked", "this Teams user or your Reviewer account is already linked to someone else"
            ) from None
        record(
            bot.tenant_id,
            actor=actor_label(actor),
            verb=Verb.TEAMS_LINKED,
            subject=f"teams:{bot.app_id}/{offer.aad_object_id}",
            data={"app_id": bot.app_id, "aad_object_id": offer.aad_object_id},
        )
    return identity


def note_refused_teams_request(bot: TeamsBot | None, code: str, detail: dict[str, Any] | None = None) -> None:
    """A request from Teams refused (no or a bad token, a decision chat may not take)."""
    with transaction.atomic(durable=True):
        record(
            bot.tenant_id if bot else None,
            actor=SYSTEM,
            verb=Verb.TEAMS_REQUEST_REFUSED,
            subject=f"teams:{bot.app_id}" if bot else "teams:unknown",
            data={"code": code, **(detail or {})},
        )
