"""A proposal page's live update when a socket reads it itself, once per event and process, not per socket.

Most events need no read here: the committing process sends the page's parts with the event
(broadcast.py) and each socket sends its person's (consumers.py). A socket re-reads when it cannot use
them (its facts unknown or stale, an invalidation of its person, its person not in the message, its
decision panel's controls changed, a bare hint), on connect, and when told its person's facts changed.

The first page socket of a Daphne process to re-read for an event starts one update for all the
sockets of that process open on the proposal (render_updates, one thread, a constant number of queries
however many sockets):

- who may still see it: every socket's session and one-time-code device (verified_users), and the
  people's memberships of the proposal's tenant and of the groups it needs, each read for all at once;
- what everyone sees, and what each audience sees: audiences.PageView, read and rendered once;
- the decision panel itself (forms with the person's CSRF token and step-up state): only for a socket
  whose controls changed since it last got one.

The other sockets of the process take their part of that update when they handle the same event. A
socket that opened after the update started, or an update without an event id, gets an update of its
own (the same function, for one socket).
"""

import asyncio
import functools
import logging
import time
import uuid
from collections import OrderedDict, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async
from django.apps import apps
from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore
from django.template.loader import render_to_string
from django_otp import DEVICE_ID_SESSION_KEY
from django_otp.models import Device

from accounts import passkeys
from approvals import events
from approvals import stepup as vote_step_up
from approvals.live.audiences import AUDIENCE_PARTIALS, SHARED_PARTIALS, PageView
from approvals.live.process_channel import LAYER_FAILED, ProcessChannel
from approvals.models import Proposal
from approvals.services.break_glass import rule_for_proposal
from approvals.web.pages import decision_context
from tenants.models import TenantMembership

log = logging.getLogger(__name__)

__all__ = ["AUDIENCE_PARTIALS", "SHARED_PARTIALS", "Update", "Viewer", "live_updates", "render_updates"]


def verified_user(scope):
    """The session's user if they signed in with a one-time code (what OTPMiddleware checks for HTTP),
    checked again on every event and message: a session signed out, or a device an admin reset, since
    the socket opened stops counting."""
    return verified_users([scope])[0]


def verified_users(scopes: list) -> list:
    """verified_user() for many sockets at once: one query for the sessions (database sessions) and one
    per kind of device, however many sockets."""
    users: list = [None] * len(scopes)
    candidates = []  # (index, user, session)
    for index, scope in enumerate(scopes):
        user, session = scope.get("user"), scope.get("session")
        if user is None or not user.is_authenticated or session is None or not session.session_key:
            continue
        candidates.append((index, user, session))
    existing = _existing_sessions([session for _, _, session in candidates])
    candidates = [c for c in candidates if c[2].session_key in existing]
    devices = _devices([session.get(DEVICE_ID_SESSION_KEY) for _, _, session in candidates])
    for index, user, session in candidates:
        device = devices.get(session.get(DEVICE_ID_SESSION_KEY))
        if device is not None and device.user_id == user.pk and device.confirmed:
            users[index] = user
    return users


def _existing_sessions(sessions: list) -> set[str]:
    """The keys of these sessions that still exist (SessionStore.exists, batched for database sessions)."""
    existing = set()
    by_model = defaultdict(set)
    for session in sessions:
        store = getattr(session, "_wrapped", session)  # the scope's session is a LazyObject around it
        if isinstance(store, DatabaseSessionStore) and type(store).exists is DatabaseSessionStore.exists:
            by_model[store.model].add(session.session_key)
        elif session.exists(session.session_key):
            existing.add(session.session_key)
    for model, keys in by_model.items():
        existing.update(model.objects.filter(session_key__in=keys).values_list("session_key", flat=True))
    return existing


def _devices(persistent_ids: list) -> dict:
    """Device.from_persistent_id for many ids: {persistent id: device}; unknown ids are left out."""
    by_model: defaultdict[type[Device], dict[int, str]] = defaultdict(dict)  # model -> {pk: persistent id}
    for persistent_id in set(filter(None, persistent_ids)):
        try:
            label, pk = persistent_id.rsplit("/", 1)
            model = apps.get_model(*label.split("."))
            pk = int(pk)
        except (ValueError, LookupError, TypeError):
            continue
        if issubclass(model, Device):
            by_model[model][pk] = persistent_id
    found = {}
    for model, ids in by_model.items():
        for device in model.objects.filter(pk__in=ids):
            found[ids[device.pk]] = device
    return found


@dataclass(frozen=True)
class Viewer:
    """What an update needs of one open socket (taken on the event loop, read in the update's thread)."""

    channel: str
    scope: Mapping[str, Any]
    csrf_token: str
    sent_mode: tuple | None  # the decision panel's controls as last sent


@dataclass(frozen=True)
class Update:
    """One socket's part of an update: partials shared with others, the panel's controls, and when the
    facts it was built on were read (time.time() at the start of the read)."""

    parts: tuple[str, ...]
    mode: tuple[str, str]
    read_at: float = 0.0

    @property
    def html(self) -> str:
        return "".join(self.parts)


def render_updates(proposal_id, viewers: list[Viewer]) -> dict[str, Update | None]:
    """Each socket's update ({channel name: Update}), or None for a socket whose person may no longer
    see the proposal (signed out, device reset, no longer a member of its tenant, or it is gone)."""
    read_at = time.time()
    updates: dict[str, Update | None] = {viewer.channel: None for viewer in viewers}
    users = dict(zip((v.channel for v in viewers), verified_users([v.scope for v in viewers]), strict=True))
    proposal = Proposal.objects.select_related("agent", "tenant", "supersedes").filter(pk=proposal_id).first()
    if proposal is None or not any(users.values()):
        return updates
    memberships = {
        m.user_id: m
        for m in TenantMembership.objects.filter(
            tenant_id=proposal.tenant_id, user_id__in={user.pk for user in users.values() if user}
        ).only("user_id", "role", "principal_id")
    }
    readers = [
        (v, users[v.channel]) for v in viewers if users[v.channel] and users[v.channel].pk in memberships
    ]
    if not readers:
        return updates
    page = PageView(proposal, {user.pk: memberships[user.pk] for _, user in readers})
    # What the decision panels need beyond the page's reads, read once for every socket.
    break_glass_rule = functools.cache(lambda: rule_for_proposal(proposal))
    passkey_owners = functools.cache(lambda: passkeys.owners_among({user.pk for _, user in readers}))
    code_owners = functools.cache(lambda: vote_step_up.code_owners_among({user.pk for _, user in readers}))
    provider = functools.cache(lambda: vote_step_up.confirms_at_provider(proposal.tenant_id))
    identity_holders = functools.cache(
        lambda: vote_step_up.identity_holders(provider(), {user.pk for _, user in readers})
    )
    for viewer, user in readers:
        audience = page.audience(user.pk)
        parts: tuple[str, ...] = (page.html, audience.html)
        controls = audience.controls(proposal)
        if controls != viewer.sent_mode:
            # On connect (the page may be older than the socket), then only when the controls change: a
            # reviewer typing a reason keeps it while others vote (reviewer.js also keeps a panel whose
            # controls are the same).
            mode = audience.mode
            panel = decision_context(
                proposal,
                user,
                viewer.scope["session"],
                page.live,
                audience.why_not,
                mode=mode,
                has_passkey=user.pk in passkey_owners(),
                has_code_device=user.pk in code_owners() if mode[0] == "vote" else None,
                break_glass_rule=break_glass_rule() if mode[0] == "vote" else None,
                provider=provider() if mode[0] == "vote" else None,
                has_identity=mode[0] == "vote" and user.pk in identity_holders(),
            )
            context = {
                "proposal": proposal,
                "decision_panel": panel,
                "oob": True,
                "csrf_token": viewer.csrf_token,
            }
            parts += (render_to_string("approvals/detail.html#decision", context),)
        updates[viewer.channel] = Update(parts=parts, mode=controls, read_at=read_at)
    return updates


class LiveUpdates:
    """The proposal pages open in this process, the channel they share in the proposals' groups
    (process_channel.py), and the updates under way for recent events."""

    RECENT = 64  # updates kept for sockets still to take their part (an event's sockets take it at once)

    def __init__(self):
        self.open: dict = defaultdict(dict)  # proposal id -> {channel name: consumer}
        # (proposal id, event id) -> (channel names still to take their part, task); an entry goes when
        # its last socket took its part, or as the oldest of more than RECENT (a socket that never did).
        self.recent: OrderedDict = OrderedDict()
        self.channel: ProcessChannel | None = None

    async def join(self, consumer) -> None:
        """Before the socket's first read: a change committed after that read reaches it. Registered before
        the group is joined, so that a leave of the proposal's last other page meanwhile keeps the group."""
        self.open[consumer.proposal_id][consumer.channel_name] = consumer
        try:
            await self._channel_for(consumer.channel_layer).add(events.proposal_group(consumer.proposal_id))
        except BaseException:  # the socket fails to open, and no disconnect will come for it
            await self.leave(consumer)
            raise

    async def leave(self, consumer) -> None:
        sockets = self.open.get(consumer.proposal_id, {})
        if sockets.pop(consumer.channel_name, None) is None or sockets:
            return
        del self.open[consumer.proposal_id]
        channel = self.channel
        if channel is None:
            return
        if not self.open:  # the process's last page socket: no receiver while none is open
            channel.stop()
            self.channel = None
        await channel.discard(
            events.proposal_group(consumer.proposal_id), lambda: consumer.proposal_id in self.open
        )

    def _channel_for(self, layer) -> ProcessChannel:
        channel = self.channel
        if channel is None or channel.layer is not layer or channel.loop is not asyncio.get_running_loop():
            channel = self.channel = ProcessChannel(layer, self._deliver, self._layer_failed)
        return channel

    async def _deliver(self, message: dict) -> None:
        """Hand a proposal group's message to this process's sockets on the proposal, one after the other,
        as a socket's own channel would have (each socket handles its messages in the order they came:
        ProposalConsumer.handling). Most take their parts from the message; the first that must re-read
        starts the update of all of them (update_for), so the others wait for one read, not one each."""
        try:
            proposal_id = uuid.UUID(str(message.get("proposal_id")))
        except ValueError:
            log.warning("live pages: a message of type %r without a proposal id", message.get("type"))
            return
        for consumer in list(self.open.get(proposal_id, {}).values()):
            try:
                await consumer.proposal_changed(message)
            except Exception:  # one socket's failure is not the others'
                log.exception("live pages: a socket's update failed")

    async def _layer_failed(self) -> None:
        self.channel = None
        for sockets in list(self.open.values()):
            for consumer in list(sockets.values()):
                await consumer.close(code=LAYER_FAILED)

    async def update_for(self, consumer, event_id: str | None = None) -> Update | None:
        """This socket's part of the update for `event_id`: started now for every socket of this process
        open on the proposal, or taken from the one another socket started for the same event."""
        key = (consumer.proposal_id, event_id)
        entry = self.recent.get(key) if event_id else None
        if entry is not None and consumer.channel_name in entry[0]:
            waiting, task = entry
        else:
            sockets = list(self.open.get(consumer.proposal_id, {}).values())
            if not event_id or entry is not None or consumer not in sockets:
                sockets = [consumer]  # an update of its own
            viewers = [socket.viewer() for socket in sockets]
            task = asyncio.ensure_future(
                database_sync_to_async(render_updates)(consumer.proposal_id, viewers)
            )
            waiting = {viewer.channel for viewer in viewers}
            if len(viewers) > 1:
                self.recent[key] = (waiting, task)
                while len(self.recent) > self.RECENT:
                    self.recent.popitem(last=False)
        waiting.discard(consumer.channel_name)
        if not waiting and self.recent.get(key, (None,))[0] is waiting:
            del self.recent[key]
        # shield: a socket closing while it waits must not cancel the others' update
        updates = await asyncio.shield(task)
        return updates[consumer.channel_name]


live_updates = LiveUpdates()
