"""Real-time fan-out. Services call these only through transaction.on_commit, so nobody is told about a
change that was rolled back. Groups are named from ids; receivers re-read state from the database
(channels-redis may drop messages to a full channel, so a message is a hint to re-read, not the state).

A broadcast that fails (Redis restarting) is logged and dropped, never raised: the change is committed,
and the caller (an agent's intake, a reviewer's vote) must get its answer, not a 500 for a hint nobody
needs. Sockets are closed by the same outage and re-read the state when they reconnect.
"""

import uuid

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from lib.commit_hooks import on_commit_in_background


def tenant_group(tenant_id) -> str:
    return f"tenant-{tenant_id}"


def proposal_group(proposal_id) -> str:
    return f"proposal-{proposal_id}"


def _send(group: str, message: dict) -> None:
    layer = get_channel_layer()
    if layer is not None:
        async_to_sync(layer.group_send)(group, message)


def proposal_changed(proposal) -> None:
    """Schedule a broadcast that this proposal changed (state, votes, quorum)."""
    tenant_id, proposal_id = proposal.tenant_id, str(proposal.id)

    def send():
        message = changed_message(proposal_id)
        _send(proposal_group(proposal_id), message)
        _send(tenant_group(tenant_id), message)

    # After commit, on the process's after-commit thread: the change's answer does not wait for Redis.
    # A failed hint is logged, not raised.
    on_commit_in_background(send)


def changed_message(proposal_id) -> dict:
    """The hint that a proposal changed: its id, and an id of this event so that the sockets of one process
    share one update of the page for it (approvals/live/fanout.py). Nothing else: every socket reads what its
    person may see."""
    return {"type": "proposal.changed", "proposal_id": str(proposal_id), "event": uuid.uuid4().hex}
