"""The message of a proposal's change, rendered by the process that committed it.

After commit, that process reads the page once (audiences.PageView, for every active member of the
tenant who has the page open: models/live.py PageWatcher) and sends, with the event's id: the partials
everyone sees (status, quorum, votes, headings), each audience's "You:" line and decision bar with the
controls it shows, and which member is in which audience. A socket whose own facts are current
(consumers.py) sends its person's parts as they are, with no read of its own; one that cannot be sure,
or whose person is not in the message, or whose decision panel's controls changed, re-reads (fanout.py).
The partials are the page's own templates, autoescaped.

A proposal whose group nobody listens on is not rendered at all (events.py asks
lib/group_listeners.py first). A proposal nobody has open, more people watching it than
MAX_PEOPLE, or a message over MAX_BYTES gets the bare hint instead (events.changed_message): every
socket re-reads, as it did before this message carried its content.
"""

import logging
import time

from django.conf import settings
from django.db.models import Subquery

from approvals import events
from approvals.live.audiences import PageView
from approvals.models import PageWatcher, Proposal
from tenants.models import TenantMembership

log = logging.getLogger(__name__)


def max_people() -> int:
    return getattr(settings, "LIVE_MESSAGE_MAX_PEOPLE", 500)


def max_bytes() -> int:
    return getattr(settings, "LIVE_MESSAGE_MAX_BYTES", 256 * 1024)


def rendered_message(proposal_id) -> dict:
    """events.changed_message, with the page's parts for every member of the tenant who has the page
    open, when they fit."""
    message = events.changed_message(proposal_id)
    # Asked first: for most changes (an allowed call's) nobody has the page open, and this one small
    # query costs less than building the members' query below.
    if not PageWatcher.objects.filter(proposal_id=proposal_id).exists():
        return message
    read_at = time.time()  # before the page's reads: a socket whose facts are newer re-reads instead
    limit = max_people()
    tenant_id = Proposal.objects.filter(pk=proposal_id).values("tenant_id")
    watching = PageWatcher.objects.filter(proposal_id=proposal_id).values("user_id")
    members = list(
        TenantMembership.objects.filter(
            tenant_id=Subquery(tenant_id), user_id__in=Subquery(watching), user__is_active=True
        ).only("user_id", "role", "principal_id")[: limit + 1]
    )
    if not members or len(members) > limit:
        return message
    proposal = Proposal.objects.select_related("agent", "tenant", "supersedes").filter(pk=proposal_id).first()
    if proposal is None:
        return message
    page = PageView(proposal, {m.user_id: m for m in members})
    audiences: list[list] = []
    index: dict[tuple, int] = {}
    people: dict[str, int] = {}
    for membership in members:
        audience = page.audience(membership.user_id)
        if audience.key not in index:
            index[audience.key] = len(audiences)
            audiences.append([audience.html, list(audience.controls(proposal))])
        people[str(membership.user_id)] = index[audience.key]
    size = len(page.html.encode()) + sum(len(html.encode()) + 64 for html, _ in audiences) + 16 * len(people)
    if size > max_bytes():
        log.info("proposal %s: live message of %d bytes sent as a hint", proposal_id, size)
        return message
    message.update(read_at=read_at, shared=page.html, audiences=audiences, people=people)
    return message
