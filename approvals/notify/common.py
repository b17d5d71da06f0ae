"""What every channel shares: agent text as one plain line, Reviewer's headline and facts of a proposal
(the page's own, approvals/policy/headline.py: every line names the currency and spells the target
alike), the link to a proposal's page, times, and the timeouts of a call."""

import re
from datetime import UTC, datetime

import httpx
from django.conf import settings
from django.urls import reverse

from approvals.policy.headline import Headline, action_headline
from lib.agent_text import visible

LINE_CAP = 120


def one_line(text: str, limit: int = LINE_CAP) -> str:
    """Agent text in a mail or a chat line: hidden characters written out, one line, capped."""
    line = re.sub(r"[\r\n\t]+", " ", visible(text or "")).strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def proposal_link(proposal) -> str:
    return settings.REVIEWER_ISSUER + reverse("approvals:detail", kwargs={"proposal_id": proposal.id})


def when(moment: datetime) -> str:
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def notify_timeout() -> httpx.Timeout:
    """The timeouts of one call to a Teams channel, a webhook endpoint or a push service: a target that
    accepts and never answers costs one call this long, never a stalled worker (approvals/notify/lanes.py)."""
    read, connect = settings.NOTIFY_READ_TIMEOUT_SECONDS, settings.NOTIFY_CONNECT_TIMEOUT_SECONDS
    return httpx.Timeout(read, connect=connect)


def headline_of(proposal) -> Headline:
    """Reviewer's own headline of the proposal, as its page states it (approvals/policy/headline.py): the
    amount with its currency (the consequences' when the arguments name none, with a note saying the
    digest does not bind it) and the target spelled as its history spells it."""
    return action_headline(proposal.action, proposal.consequences)


def headline_line(proposal, limit: int = LINE_CAP) -> str:
    """The headline as one plain line ("Refund EUR 22.00 · order:7002"), for titles and notifications."""
    return one_line(headline_of(proposal).text, limit)


def facts(proposal) -> list[tuple[str, str]]:
    """What every chat message and card lists under the summary, in the page's words and spellings:
    the action, how much (with its currency, and the currency's note when the digest does not bind it),
    the target and recipient, a look-alike or hidden-character warning, risk, reversibility, who asks
    and the expiry. Each value is one plain line."""
    headline = headline_of(proposal)
    shown = [("Action", one_line(proposal.tool, 80))]
    if headline.amount:
        shown.append(("Amount", one_line(headline.amount, 60)))
    if headline.currency_note:
        shown.append(("Currency", one_line(headline.currency_note, 100)))
    if headline.target:
        shown.append(("Target", one_line(headline.target, 80)))
    if headline.recipient:
        shown.append(("To", one_line(headline.recipient, 80)))
    if headline.warnings:
        shown.append(("Check", one_line("; ".join(headline.warnings), 200)))
    asker = one_line(proposal.principal_display or proposal.principal_id, 60)
    shown += [
        ("Risk", proposal.risk or "not rated"),
        ("Reversibility", proposal.reversibility or "unclassified"),
        ("Asked by", f"{one_line(proposal.agent.name, 60)} for {asker}"),
        ("Expires", when(proposal.expires_at)),
    ]
    return shown
