"""Building the doors' JSON answers: no-store, the proposal page's absolute URL."""

from datetime import datetime
from typing import Any

from django.conf import settings
from django.http import JsonResponse
from django.urls import reverse

from approvals.models import Proposal
from oauth.errors import no_store


def json_answer(body: dict[str, Any], status: int = 200) -> JsonResponse:
    return no_store(JsonResponse(body, status=status))


def page_url(proposal: Proposal) -> str:
    return settings.REVIEWER_ISSUER + reverse("approvals:detail", args=[proposal.pk])


def seconds_until(moment: datetime, now: datetime) -> int:
    return max(0, int((moment - now).total_seconds()))
