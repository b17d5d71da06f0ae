"""What every channel shares: agent text as one plain line, the link to a proposal's page, times, and
the timeouts of a call."""

import re
from datetime import UTC, datetime

import httpx
from django.conf import settings
from django.urls import reverse

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
