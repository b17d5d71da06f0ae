"""Who has a proposal's page open: the people a change's live message is rendered for."""

from django.conf import settings
from django.db import models
from django.utils import timezone

from approvals.models.proposals import Proposal


class PageWatcher(models.Model):
    """One open page socket of a proposal (approvals/live/consumers.py ProposalConsumer). The process
    that commits a change renders the page's message for these people only, and sends the bare hint
    when there are none (approvals/live/broadcast.py), so a proposal nobody is looking at (an allowed
    call's, most of them) costs no render. Written when the socket connects, before it joins the group
    and reads the page; deleted when it disconnects. A row left by a killed process costs renders of
    that proposal until the worker deletes it (approvals/services/page_watchers.py); a missing row
    costs a re-read, never an update: a socket whose person is not in a message reads the page itself."""

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    channel_name = models.CharField(max_length=200, unique=True)
    opened_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return f"{self.user_id} on {self.proposal_id}"
