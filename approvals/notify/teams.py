"""Microsoft Teams: the proposal as an Adaptive Card, posted through a channel's Workflows incoming webhook
("Post to a channel when a webhook request is received"), by the worker.

Why the incoming webhook and not the Bot Framework: the Bot Framework SDK for Python (botbuilder) is
archived, and a bot needs an Azure registration, a public messaging endpoint and per-user
conversation references, all for what Reviewer needs here: a card with a link. A Workflows webhook is
one HTTPS POST of a documented JSON shape, which httpx sends through the outbound allow-list like every
other call Reviewer makes (no extra library). Its limit: a webhook cannot edit a card it posted, so
"updated on decision" is a second card in the channel saying how the request ended (expired, decided,
withdrawn), posted once. Decisions are never taken in Teams: the card links to the page.

Agent text goes only into `TextRun`s of a `RichTextBlock`, which Adaptive Cards render without markdown
(a TextBlock would turn "[x](https://…)" into a link), through `one_line`.
"""

import asyncio
import logging
from datetime import datetime, timedelta

import httpx
from django.utils import timezone

from approvals.a2a import outbound
from approvals.models.notifications import TeamsChannel, TeamsPost
from approvals.notify import common
from approvals.notify.common import notify_timeout, one_line, proposal_link
from approvals.notify.lanes import Lane
from approvals.notify.secrets import SecretMissing, read_secret
from approvals.notify.slack_messages import status_line
from approvals.services.chat_posts import next_look
from approvals.services.teams_posts import (
    plan_teams_posts,
    record_teams_checked,
    record_teams_failure,
    record_teams_sent,
)
from approvals.states import TERMINAL, WAITING_FOR_PEOPLE

log = logging.getLogger(__name__)

BATCH = 50


def _runs(text: str) -> dict:
    return {"type": "RichTextBlock", "inlines": [{"type": "TextRun", "text": text or " "}]}


def card(proposal, *, outcome: bool = False) -> dict:
    """The Adaptive Card (schema 1.4, what Teams renders) of a request, or of how it ended."""
    facts = common.facts(proposal)
    title = "Request closed" if outcome else "Approval requested"
    body = [
        {"type": "TextBlock", "size": "Medium", "weight": "Bolder", "text": title, "wrap": True},
        _runs(common.headline_line(proposal, 160)),
        _runs(one_line(proposal.summary, 300)),
        *(
            {
                "type": "ColumnSet",
                "columns": [
                    {
                        "type": "Column",
                        "width": "auto",
                        "items": [{"type": "TextBlock", "text": label, "weight": "Bolder"}],
                    },
                    {"type": "Column", "width": "stretch", "items": [_runs(value)]},
                ],
            }
            for label, value in facts
        ),
        _runs(status_line(proposal)),
    ]
    return {
        "type": "AdaptiveCard",
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "version": "1.4",
        "body": body,
        "actions": [
            {"type": "Action.OpenUrl", "title": "Review in Reviewer", "url": proposal_link(proposal)}
        ],
    }


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
    response = asyncio.run(_post(read_secret(channel.webhook_url_ref), body))
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
        .select_related("proposal__agent", "channel")
        .order_by("next_attempt_at", "id")[:BATCH]
    )
    by_channel: dict[int, list[TeamsPost]] = {}
    for post in due:
        by_channel.setdefault(post.channel_id, []).append(post)
    sent = []  # (list.append is atomic: the lane's threads count here side by side)

    def send_post(post: TeamsPost) -> bool:
        proposal = post.proposal
        closed = proposal.state in TERMINAL or proposal.state not in WAITING_FOR_PEOPLE
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

    lane.run(by_channel, send_post)
    return len(sent)
