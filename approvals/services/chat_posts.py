"""Chat messages follow their proposals. A proposal's Slack messages and Teams cards are looked at when
planned, when the proposal changes, after a backoff when a call failed, and otherwise only every
RESYNC as a safety net (their `next_attempt_at`), so the worker's chat steps cost what changed, never
every open post at every tick, and none waits behind others.

"When the proposal changes" is read from the tenant's sealed audit chain after a cursor, as the webhook
feed reads it (webhooks.py): every change to a proposal (a vote, a transition, a question) is an event
whose subject is the proposal, and the changes themselves never query chat tables.
"""

from datetime import datetime, timedelta

from django.utils import timezone

from approvals.models.notifications import SlackPost, SlackWorkspace, TeamsChannel, TeamsPost
from approvals.services.chain_cursors import events_after_cursor
from audit.labels import tenant_chain

FEED = "chat"  # the cursor's name (audit SiemCursor)
# An open post nobody changed is looked at again this long after its last look: a repair for anything
# the chain did not say (a message edited or deleted in Slack by hand stays as it is until then).
RESYNC = timedelta(minutes=5)
PROPOSAL_SUBJECT = "proposal:"


def next_look(now: datetime) -> datetime:
    return now + RESYNC


def mark_changed_posts_due(now: datetime | None = None, batch: int = 500) -> int:
    """The worker's step, before the Slack and Teams steps: the open posts of every proposal with an
    event sealed after the cursor are due now, and the cursor moves, in one transaction per tenant (a
    tenant with an enabled Slack workspace or Teams channel). Returns how many posts it marked."""
    now = now or timezone.now()
    tenants = set(SlackWorkspace.objects.filter(enabled=True).values_list("tenant_id", flat=True))
    tenants |= set(TeamsChannel.objects.filter(enabled=True).values_list("tenant_id", flat=True))
    marked = 0
    for tenant_id in sorted(tenants):
        chain = tenant_chain(tenant_id)
        with events_after_cursor(
            FEED, chain, batch, only=("subject",), subject__startswith=PROPOSAL_SUBJECT
        ) as changes:
            changed = {event.subject.removeprefix(PROPOSAL_SUBJECT) for event in changes}
            if changed:
                for posts in (SlackPost.objects, TeamsPost.objects):
                    marked += posts.filter(proposal_id__in=changed, final=False).update(next_attempt_at=now)
    return marked
