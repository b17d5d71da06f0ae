"""Real-time fan-out. Services call these only through transaction.on_commit, so nobody is told about a
change that was rolled back. Groups are named from ids. A proposal page's message carries the page's
parts rendered after commit by the committing process (approvals/live/broadcast.py, registered with
render_messages_with); a socket that cannot be sure its own facts are current re-reads instead
(channels-redis may drop messages to a full channel, so a socket never relies on having seen them all).

A person's open pages keep what they know of their person (session, device, memberships) until told
otherwise: access_facts_changed tells the sockets of one person, or of one session, to re-read them.

A broadcast goes only to the groups somebody listens on (lib/group_listeners.py, asked once per
message after commit): a proposal nobody has open, a tenant whose queue nobody has open, a person with no
page open cost no render and no send. When that cannot be known (Redis down, no Redis), it is sent.

A broadcast that fails (Redis restarting) is logged and dropped, never raised: the change is committed,
and the caller (an agent's intake, a reviewer's vote) must get its answer, not a 500 for a hint nobody
needs. Sockets are closed by the same outage and re-read the state when they reconnect.
"""

import hashlib
import logging
import uuid
from collections.abc import Callable

from channels.layers import get_channel_layer
from django.db import transaction
from redis.exceptions import ConnectionError as RedisConnectionError

from lib import group_listeners as listeners
from lib.commit_hooks import on_commit_in_background, run_async

log = logging.getLogger(__name__)


def tenant_group(tenant_id) -> str:
    return f"tenant-{tenant_id}"


def proposal_group(proposal_id) -> str:
    return f"proposal-{proposal_id}"


def person_group(user_id) -> str:
    return f"person-{user_id}"


def session_group(session_key: str) -> str:
    """A session's group, named from a digest of its key (the key itself is a credential)."""
    return "session-" + hashlib.sha256(session_key.encode()).hexdigest()[:40]


_render: list[Callable[[str], dict]] = []


def render_messages_with(renderer: Callable[[str], dict]) -> None:
    """The function that renders a proposal page's message (approvals.live.broadcast.rendered_message)."""
    _render[:] = [renderer]


def _send_all(messages: list[tuple[str, dict]]) -> None:
    """Send each (group, message) in order, in one run of an event loop (on the after-commit thread,
    its own loop and Redis connection, kept: lib/commit_hooks.py run_async)."""
    layer = get_channel_layer()
    if layer is None:
        return

    async def send_each():
        for group, message in messages:
            try:
                await layer.group_send(group, message)
            except RedisConnectionError:
                # The after-commit thread's connection outlives a Redis restart, and the first command
                # on it then fails: once more, on a new connection (a second failure is a real outage).
                await layer.group_send(group, message)

    run_async(send_each)


def send_to_listeners(messages: list[tuple[str, dict]]) -> None:
    """Send each (group, message) whose group somebody listens on (lib/group_listeners.py: asked in one
    round trip; every group when that cannot be known), from synchronous code after a commit."""
    listened = listeners.listened([group for group, _ in messages])
    wanted = [(group, message) for group, message in messages if group in listened]
    if wanted:
        _send_all(wanted)


def proposal_changed(proposal, *, render_now: bool = False, created: bool = False) -> None:
    """Schedule a broadcast that this proposal changed (state, votes, quorum).

    `created`: the proposal was stored in the caller's transaction (intake, a reviewer's edit), so no
    page of it can be open before the commit; its group gets the bare hint, with no render (a socket
    that connects between the commit and the send re-reads on it).

    `render_now`: the caller's transaction has made its last change to what the page shows (cast_vote's
    vote short of the quorum). The page's message is then rendered now, inside the transaction (it sees
    the transaction's own writes, and the caller holds the proposal's row lock, so no other change of it
    commits in between), and only sent after commit: the render is no longer between the commit and the
    sockets. Only in the outermost transaction (an enclosing one could still write after this); when
    rendering fails, the message is rendered after commit as without render_now (else the hint).
    """
    tenant_id, proposal_id = proposal.tenant_id, str(proposal.id)
    early = _render_before_commit(proposal_id) if render_now and not created else None
    render = _render[0] if _render and not created else None

    def send():
        hint = changed_message(proposal_id)
        page, queue = proposal_group(proposal_id), tenant_group(tenant_id)
        listened = listeners.listened([page, queue])  # one round trip; both when it cannot be read
        messages = []
        if page in listened:  # else no render: nobody has the page open nor waits on the proposal
            try:
                message = early or (render(proposal_id) if render else hint)
            except Exception:  # a hint still reaches every socket, which then re-reads
                log.exception("rendering proposal %s's live message failed; sent as a hint", proposal_id)
                message = hint
            messages.append((page, message))
        if queue in listened:  # the queue's sockets re-read their own lists on the tenant's hint
            messages.append((queue, hint))
        if messages:
            _send_all(messages)

    # After commit, on the process's after-commit thread: the change's answer does not wait for Redis.
    # A failed hint is logged, not raised.
    on_commit_in_background(send)


def _render_before_commit(proposal_id: str) -> dict | None:
    """The message rendered in the current transaction, or None to render it after commit: not the
    outermost transaction (or none), no renderer, or the render failed (logged)."""
    connection = transaction.get_connection()
    if not _render or not connection.in_atomic_block or connection.savepoint_ids:
        return None
    try:
        return _render[0](proposal_id)
    except Exception:
        log.exception(
            "rendering proposal %s's live message before commit failed; rendered after", proposal_id
        )
        return None


def changed_message(proposal_id) -> dict:
    """The hint that a proposal changed: its id, and an id of this event so that the sockets of one process
    share one update of the page for it (approvals/live/fanout.py). Nothing else: every socket reads what its
    person may see."""
    return {"type": "proposal.changed", "proposal_id": str(proposal_id), "event": uuid.uuid4().hex}


def access_facts_changed(*, user_id=None, session_key: str | None = None) -> None:
    """After commit, tell the open pages of this person (or of this session) that what they hold about
    their person's access may be out of date: they re-read it at once, and close if it ended."""
    groups = ([person_group(user_id)] if user_id is not None else []) + (
        [session_group(session_key)] if session_key else []
    )
    messages = [(group, {"type": "facts.changed"}) for group in groups]
    on_commit_in_background(lambda: send_to_listeners(messages))
