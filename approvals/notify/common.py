"""What every channel shares: agent text as one plain line, the link to a proposal's page, times."""

import re
from datetime import UTC, datetime

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
