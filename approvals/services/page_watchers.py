"""Who has a proposal's page open (approvals/models/live.py PageWatcher), kept by the page's socket.

Not audited: opening a page decides nothing and changes no proposal (as a session row, which Django
writes for every sign-in, is not an event of the trail). Each function is one statement, so it needs
no transaction of its own. The rows only choose how a change reaches the sockets (rendered once by
the committing process, or as a hint the sockets answer by reading): a row too many costs a render,
a row too few a re-read, and neither shows anyone what they may not see.
"""

from datetime import datetime, timedelta

from django.utils import timezone

from approvals.models.live import PageWatcher

# A socket's row is deleted when it disconnects; one left by a process that was killed is deleted by the
# worker after this long. A socket open for longer loses its row and reads the page itself on each change.
STALE_AFTER = timedelta(hours=24)


def watch(proposal_id, user_id, channel_name: str) -> None:
    """Record the socket `channel_name` of `user_id` as open on the proposal's page."""
    PageWatcher.objects.create(proposal_id=proposal_id, user_id=user_id, channel_name=channel_name)


def stop_watching(channel_name: str) -> None:
    PageWatcher.objects.filter(channel_name=channel_name).delete()


def forget_stale(now: datetime | None = None) -> int:
    """Delete the rows of sockets that opened more than STALE_AFTER ago (the worker, each tick)."""
    deleted, _ = PageWatcher.objects.filter(opened_at__lt=(now or timezone.now()) - STALE_AFTER).delete()
    return deleted
