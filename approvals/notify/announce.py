"""The worker's announcing step: each new proposal that waits for people is announced once, on every
channel that carries new requests: its Slack messages and Teams cards are planned (the Slack and Teams
steps post them in the same tick) and it is pushed to the phones of the people who could decide it.

It reads only the follow-ups not yet announced (services.follow_ups.unannounced_follow_ups), oldest
first, and marks them announced (one UPDATE) after their channels were planned: every new proposal gets
its turn however many wait. Planning and pushing are idempotent (one post per channel, one push per person and
reason), so a worker that stops midway announces again what it had not marked. A channel connected
later carries the requests that arrive after it.
"""

import logging
from collections import defaultdict
from datetime import datetime

from django.utils import timezone

from approvals.notify import push, slack_sync, teams
from approvals.services.follow_ups import mark_announced, unannounced_follow_ups
from approvals.states import OPEN_FOR_VOTES

log = logging.getLogger(__name__)

BATCH = 50


def run(now: datetime | None = None) -> int:
    """Returns how many proposals it announced (a proposal that no longer waits is only marked)."""
    now = now or timezone.now()
    announced = 0
    new = unannounced_follow_ups(BATCH)
    if not new:
        return 0
    # The chat channels of the batch's tenants, read once for all of it.
    tenant_ids = {follow_up.proposal.tenant_id for follow_up in new}
    workspaces = by_tenant(slack_sync.enabled_workspaces(tenant_ids))
    channels = by_tenant(teams.enabled_channels(tenant_ids))
    done = []
    for follow_up in new:
        proposal = follow_up.proposal
        if proposal.state in OPEN_FOR_VOTES:
            try:
                slack_sync.announce(proposal, workspaces[proposal.tenant_id])
                teams.announce(proposal, channels[proposal.tenant_id])
                push.announce(proposal)
            except Exception:  # one proposal's failure must not stop the others; announced next tick
                log.exception("could not announce proposal %s", proposal.id)
                continue
            announced += 1
        done.append(follow_up)
    mark_announced(done, now)  # after their channels were planned; a failed one is tried next tick
    return announced


def by_tenant(rows) -> defaultdict[int, list]:
    grouped: defaultdict[int, list] = defaultdict(list)
    for row in rows:
        grouped[row.tenant_id].append(row)
    return grouped
