"""Tenant webhooks: registering an endpoint, and queuing one signed event per endpoint in the transaction
of each proposal transition (the outbox carries it from there: retries with backoff, dead letters).

The event says what happened to which proposal, in Reviewer's words: its id, tool (hidden characters
written out), states, rev, times and the link to its page. Never the decision token, a code, a digest
or the agent's summary: whoever needs more opens the page or asks the API.
"""

import base64
import secrets
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from approvals import wakeup
from approvals.models import OutboxMessage
from approvals.notify.models import WebhookEndpoint
from approvals.services.common import _audit_time, actor_label, record
from approvals.services.errors import ConfigRefused
from audit.models import Verb
from reviewer.agent_text import visible

# The event types an endpoint may ask for: one per state a proposal can enter.
EVENT_TYPES = (
    "proposal.awaiting_review",
    "proposal.allowed",
    "proposal.denied",
    "proposal.approved",
    "proposal.rejected",
    "proposal.info_requested",
    "proposal.expired",
    "proposal.revoked",
    "proposal.cancelled",
    "proposal.superseded",
    "proposal.executing",
    "proposal.succeeded",
    "proposal.failed",
    "proposal.unknown",
)


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def endpoint_refusal(url: str, events) -> ConfigRefused | None:
    parts = urlsplit(url or "")
    if parts.scheme != "https" and not (parts.scheme == "http" and settings.NOTIFY_ALLOW_HTTP):
        return ConfigRefused("webhook_url", "a webhook endpoint is an https:// URL", "url")
    if not parts.hostname:
        return ConfigRefused("webhook_url", "the URL names no host", "url")
    if not isinstance(events, list) or any(e not in EVENT_TYPES for e in events):
        return ConfigRefused("webhook_events", "events is a list of: " + ", ".join(EVENT_TYPES), "events")
    return None


def register_endpoint(*, tenant, url: str, events=(), actor=None) -> WebhookEndpoint:
    """A new endpoint with a fresh signing secret (the caller shows it to the admin once)."""
    events = list(events)
    refusal = endpoint_refusal(url, events)
    if refusal:
        raise refusal
    with transaction.atomic():
        endpoint = WebhookEndpoint.objects.create(tenant=tenant, url=url, events=events, secret=new_secret())
        record(
            tenant.pk,
            actor=actor_label(actor),
            verb=Verb.WEBHOOK_REGISTERED,
            subject=f"webhook:{endpoint.pk}",
            data={"url": url, "events": events},
        )
    return endpoint


def event_for(proposal, previous: str) -> dict:
    link = settings.REVIEWER_ISSUER + reverse("approvals:detail", kwargs={"proposal_id": proposal.id})
    return {
        "type": f"proposal.{proposal.state}",
        "timestamp": _audit_time(timezone.now()),
        "data": {
            "proposal_id": str(proposal.id),
            "tenant": proposal.tenant.slug,
            "agent": proposal.agent.slug,
            "tool": visible(proposal.tool)[:200],
            "state": proposal.state,
            "previous_state": previous,
            "rev": proposal.rev,
            "expires_at": _audit_time(proposal.expires_at),
            "decided_at": _audit_time(proposal.decided_at),
            "link": link,
        },
    }


def enqueue_transition_events(proposal, previous: str) -> int:
    """Inside a transition's transaction: one outbox row per enabled endpoint that wants this event."""
    endpoints = [
        e
        for e in WebhookEndpoint.objects.filter(tenant_id=proposal.tenant_id, enabled=True).order_by("id")
        if not e.events or f"proposal.{proposal.state}" in e.events
    ]
    if not endpoints:
        return 0
    event = event_for(proposal, previous)
    OutboxMessage.objects.bulk_create(
        [
            OutboxMessage(
                kind=OutboxMessage.Kind.WEBHOOK,
                message_id=f"msg_{proposal.id.hex}_{proposal.rev}_{endpoint.pk}",
                agent_id=proposal.agent_id,
                proposal=proposal,
                payload={"endpoint": endpoint.pk, "event": event},
                next_attempt_at=timezone.now(),
            )
            for endpoint in endpoints
        ],
        ignore_conflicts=True,
    )
    wakeup.outbox_message_queued()
    return len(endpoints)
