"""Microsoft Teams, by the worker: a proposal's Adaptive Card (approvals/notify/teams_cards.py) in each
channel that follows one of its groups, through the channel's bot or its Workflows incoming webhook.

- A channel with a bot (`TeamsChannel.bot`, approvals/notify/teams_bot.py): one card, posted to the
  channel's conversation through the Bot Connector and updated in place as votes arrive and when the
  request ends; where the policy allows chat decisions it carries Approve and Reject, which the bot
  answers (approvals/notify/teams_views.py).
- A channel without one: its Workflows incoming webhook ("Post to a channel when a webhook request is
  received"), one HTTPS POST of a card with a link. A webhook cannot edit a card it posted, so how the
  request ended is a second card, posted once, and decisions are taken on the page.

Both are sent with httpx through the outbound allow-list, https only unless NOTIFY_ALLOW_HTTP.
"""

import asyncio
import logging
from datetime import datetime, timedelta

import httpx
from django.utils import timezone

from approvals.models.notifications import TeamsChannel, TeamsPost
from approvals.notify import teams_bot
from approvals.notify.common import notify_timeout
from approvals.notify.lanes import Lane
from approvals.notify.secrets import SecretMissing, read_secret
from approvals.notify.teams_cards import card, shown_hash
from approvals.notify.teams_cards import closed as is_closed
from approvals.services.chat_posts import next_look
from approvals.services.teams_posts import (
    plan_teams_posts,
    record_teams_checked,
    record_teams_failure,
    record_teams_sent,
)
from lib import outbound

log = logging.getLogger(__name__)

BATCH = 50


def message(adaptive_card: dict) -> dict:
    """The body a Workflows webhook takes: a message with the card as its one attachment."""
    return {
        "type": "message",
        "attachments": [
            {
                "contentType": "application/vnd.microsoft.card.adaptive",
                "contentUrl": None,
                "content": adaptive_card,
            }
        ],
    }


async def _post(url: str, body: dict) -> httpx.Response:
    async with outbound.async_client(timeout=notify_timeout(), follow_redirects=False) as client:
        return await client.post(url, json=body)


def send(channel: TeamsChannel, body: dict) -> None:
    url = read_secret(channel.webhook_url_ref)
    if refusal := teams_bot.https_refusal(url):
        raise httpx.UnsupportedProtocol(refusal)
    response = asyncio.run(_post(url, body))
    if not 200 <= response.status_code < 300:
        raise httpx.HTTPStatusError(
            f"Teams answered {response.status_code}", request=response.request, response=response
        )


def enabled_channels(tenant_ids) -> list[TeamsChannel]:
    """The enabled channels of these tenants, read once per announcing step for all it announces."""
    return list(TeamsChannel.objects.filter(tenant_id__in=tenant_ids, enabled=True))


def announce(proposal, channels: list[TeamsChannel]) -> None:
    """Plan a new proposal's cards in those of `channels`, the enabled channels of its tenant, that follow
    one of its groups (the worker's announcing step, approvals/notify/announce.py); `run` posts them in
    the same tick."""
    slugs = {t["group"] for t in proposal.requirements.get("thresholds", [])}
    plan_teams_posts(proposal, [c for c in channels if slugs & set(c.groups)])


def run(now: datetime | None = None, lane: Lane | None = None) -> int:
    """The worker's step: send the cards that are due (services.chat_posts: planned, the proposal
    changed, retried, or the safety net's turn), most overdue first, the channels side by side in
    `lane` (one at a time without one). A channel whose webhook failed is in the lane's back-off: its
    cards stay due and are left out until it ended."""
    now = now or timezone.now()
    lane = lane or Lane("teams", threads=0)
    due = (
        TeamsPost.objects.filter(final=False, channel__enabled=True, next_attempt_at__lte=now)
        .exclude(channel_id__in=lane.backoff.skipped())
        .select_related("proposal__agent", "channel__bot")
        .order_by("next_attempt_at", "id")[:BATCH]
    )
    by_channel: dict[int, list[TeamsPost]] = {}
    for post in due:
        by_channel.setdefault(post.channel_id, []).append(post)
    sent = []  # (list.append is atomic: the lane's threads count here side by side)

    def send_post(post: TeamsPost) -> bool:
        proposal = post.proposal
        closed = is_closed(proposal)
        if post.channel.bot_id is not None:
            return send_by_bot(post, proposal, closed)
        if post.requested_at is not None and not closed:
            record_teams_checked(post, next_look(now))  # waiting, and its card is posted: nothing to add
            return True
        if post.requested_at is None and closed:
            record_teams_sent(
                post, requested=False, outcome_state=proposal.state, next_look=now
            )  # ended before it was posted
            return True
        try:
            send(post.channel, message(card(proposal, outcome=closed)))
        except (httpx.HTTPError, SecretMissing, OSError) as error:
            log.warning("teams post %s failed: %s", post.pk, type(error).__name__)
            record_teams_failure(post, now + timedelta(seconds=min(2 ** (post.attempts + 1) * 5, 600)))
            return False
        record_teams_sent(
            post,
            requested=not closed,
            outcome_state=proposal.state if closed else "",
            next_look=next_look(now),
        )
        sent.append(post)
        return True

    def send_by_bot(post: TeamsPost, proposal, closed: bool) -> bool:
        """One card per channel, posted once and then replaced in place whenever what it shows changed."""
        shown_card = card(proposal, outcome=closed, decide=True)
        shown = shown_hash(shown_card)
        if post.shown == shown or (not post.activity_id and closed):
            # Shows what it should, or ended before it was posted: nothing to send.
            record_teams_checked(
                post, next_look(now), final=closed, outcome_state=proposal.state if closed else ""
            )
            return True
        channel = post.channel
        bot = channel.bot
        assert bot is not None  # send_post's branch
        try:
            if post.activity_id:
                teams_bot.update_card(bot, channel.conversation_id, post.activity_id, shown_card)
                activity_id = post.activity_id
            else:
                activity_id = teams_bot.post_card(bot, channel.conversation_id, shown_card)
        except (httpx.HTTPError, SecretMissing, OSError, ValueError, KeyError) as error:
            log.warning("teams bot post %s failed: %s", post.pk, type(error).__name__)
            record_teams_failure(post, now + timedelta(seconds=min(2 ** (post.attempts + 1) * 5, 600)))
            return False
        record_teams_sent(
            post,
            requested=post.requested_at is None,
            outcome_state=proposal.state if closed else "",
            next_look=next_look(now),
            activity_id=activity_id,
            shown=shown,
        )
        sent.append(post)
        return True

    lane.run(by_channel, send_post)
    return len(sent)
