"""Tenant webhooks: registering an endpoint, and the worker's feed that turns each sealed proposal
transition of the tenant's audit chain into one outbox row per endpoint (the outbox carries it from
there: retries with backoff, dead letters; approvals/notify/webhook_sender.py signs and sends it).

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

from approvals.models import OutboxMessage, Proposal
from approvals.models.notifications import WebhookEndpoint
from approvals.services.chain_cursors import events_after_cursor, start_at_head
from audit.labels import actor_label, tenant_chain
from audit.models import AuditEvent, Verb
from audit.trail import audit_time, record
from lib import outbound
from lib.agent_text import visible
from lib.errors import ConfigRefused
from lib.url_credentials import without_credentials

FEED = "webhooks"  # the feed's cursor name (audit SiemCursor: how far a consumer has read a chain)

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
    """Why this endpoint is refused, or None. The URL is judged by the rule delivery applies to every
    request (lib/outbound.py): an endpoint that could never be delivered to is refused here, with the
    reason, rather than registered to fail (and dead-letter) every event. Resolves the host."""
    parts = urlsplit(url or "")
    if parts.scheme != "https" and not (parts.scheme == "http" and settings.NOTIFY_ALLOW_HTTP):
        return ConfigRefused("webhook_url", "a webhook endpoint is an https:// URL", "url")
    if not parts.hostname:
        return ConfigRefused("webhook_url", "the URL names no host", "url")
    not_called = outbound.url_refusal(url)
    if not_called:
        return ConfigRefused(
            "webhook_url_not_allowed",
            f"Reviewer would not deliver to this URL ({not_called}); the operator allows hosts and "
            "networks with AGENT_ALLOWED_HOSTS and AGENT_ALLOWED_NETWORKS",
            "url",
        )
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
        start_at_head(FEED, tenant_chain(tenant.pk))
        record(
            tenant.pk,
            actor=actor_label(actor),
            verb=Verb.WEBHOOK_REGISTERED,
            subject=f"webhook:{endpoint.pk}",
            # A URL may carry credentials (user:password@, ?token=): the trail keeps its shape only.
            data={"url": without_credentials(url), "events": events},
        )
    return endpoint


def event_for(proposal, transition: AuditEvent) -> dict:
    """The Standard Webhooks payload of one transition (its audit event): type, timestamp, data."""
    link = settings.REVIEWER_ISSUER + reverse("approvals:detail", kwargs={"proposal_id": proposal.id})
    return {
        "type": f"proposal.{transition.data['to']}",
        "timestamp": audit_time(transition.at),
        "data": {
            "proposal_id": str(proposal.id),
            "tenant": proposal.tenant.slug,
            "agent": proposal.agent.slug,
            "tool": visible(proposal.tool)[:200],
            "state": transition.data["to"],
            "previous_state": transition.data["from"],
            "rev": transition.data.get("rev"),
            "expires_at": audit_time(proposal.expires_at),
            "audit": {"chain": transition.chain, "seq": transition.seq, "hash": transition.hash},
            "link": link,
        },
    }


def feed_from_chain(now=None, batch: int = 200) -> int:
    """The worker's step: for each tenant with an enabled endpoint, the sealed proposal transitions
    after the feed's cursor become outbox rows (one per endpoint that wants the event), and the cursor
    moves, in one transaction: each transition is queued once. Reading the sealed chain keeps the
    transitions themselves (intake, votes) free of any webhook query."""
    queued = 0
    tenants = set(WebhookEndpoint.objects.filter(enabled=True).values_list("tenant_id", flat=True))
    for tenant_id in sorted(tenants):
        chain = tenant_chain(tenant_id)
        with events_after_cursor(FEED, chain, batch, verb=Verb.PROPOSAL_TRANSITIONED) as transitions:
            queued += _queue(tenant_id, transitions)
    return queued


def _queue(tenant_id, transitions: list[AuditEvent]) -> int:
    endpoints = list(WebhookEndpoint.objects.filter(tenant_id=tenant_id, enabled=True).order_by("id"))
    ids = [t.subject.split(":", 1)[1] for t in transitions]
    proposals = {str(p.pk): p for p in Proposal.objects.filter(pk__in=ids).select_related("tenant", "agent")}
    rows = []
    for transition in transitions:
        proposal = proposals.get(transition.subject.split(":", 1)[1])
        wanted = [e for e in endpoints if not e.events or f"proposal.{transition.data['to']}" in e.events]
        if proposal is None or not wanted:
            continue
        event = event_for(proposal, transition)
        rows += [
            OutboxMessage(
                kind=OutboxMessage.Kind.WEBHOOK,
                message_id=f"msg_{proposal.id.hex}_{transition.data.get('rev')}_{endpoint.pk}",
                agent_id=proposal.agent_id,
                proposal=proposal,
                payload={"endpoint": endpoint.pk, "event": event},
                next_attempt_at=timezone.now(),
            )
            for endpoint in wanted
        ]
    OutboxMessage.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)
