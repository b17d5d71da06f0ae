"""Telling a person's open pages that their access changed, so that they close at once.

Every socket re-checks its person (session still there, verified, still a member) on every hint it gets
(approvals/consumers.py): the queue's sockets listen to the tenant's group, a proposal page's to that
proposal's. So after a deprovisioning commits, one hint goes to the tenant's group and one to each open
proposal of the tenant; the deprovisioned person's sockets find their session gone and close, everyone
else's re-read and carry on.
"""

from django.db.models import Q

from approvals import events
from approvals.models import Proposal
from approvals.states import OPEN_FOR_VOTES
from lib.commit_hooks import on_commit


def access_ended(tenant, user) -> None:
    """After the current transaction commits, the tenant's queue sockets, and the sockets of its open
    proposals and of those the person voted on, re-check their person. (A decided proposal's page the
    person only looked at keeps its socket until its next event; their next request is refused.)"""
    pages = Proposal.objects.filter(tenant=tenant).filter(Q(state__in=OPEN_FOR_VOTES) | Q(votes__voter=user))
    for proposal in pages.distinct().only("id", "tenant_id"):
        events.proposal_changed(proposal)  # the proposal's group and the tenant's

    def tell_the_queues():
        events.send_to_listeners([(events.tenant_group(tenant.id), events.changed_message("access"))])

    on_commit(tell_the_queues, robust=True)
