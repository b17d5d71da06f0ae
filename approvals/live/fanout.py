"""A proposal page's live update, rendered once per event and audience in each process, not once per socket.

A `proposal.changed` event (events.py) reaches every socket open on the proposal. The first socket of a
Daphne process to handle an event starts one update for all the sockets of that process open on the
proposal (render_updates, one thread, a constant number of queries however many sockets):

- who may still see it: every socket's session and one-time-code device (verified_users), and the
  people's memberships of the proposal's tenant and of the groups it needs, each read for all at once;
- what everyone sees (status, quorum, votes, the signed decision, the heading of "what happens", the
  successor link): read and rendered once;
- what an audience sees (the "You:" line and the phone's decision bar: the controls a person gets, their
  groups, their vote): rendered once per distinct audience;
- the decision panel itself (forms with the person's CSRF token and step-up state): only for a socket
  whose controls changed since it last got one, as before.

The other sockets of the process take their part of that update when they handle the same event. The
message carries only the proposal id and an event id: each socket's content is read by the process
that serves it, for the person it serves, after the change was committed, so nothing in the message
can reach an audience that must not see it. A socket that opened after the update started, or an
event without an id, gets an update of its own (the same function, for one socket).
"""

import asyncio
import functools
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
from approvals import stepup as vote_step_up
from approvals.models import Proposal, Vote
from approvals.selectors import ineligibility_from, threshold_groups
from approvals.selectors.standins import delegated_groups, stand_in_users
from approvals.services import lifecycle
from approvals.services.break_glass import rule_for_proposal
from approvals.web.pages import consequence_label, decision_context, decision_mode_from, live_context, my_vote
from tenants.models import GroupMembership, TenantMembership

# Rendered once per update for everyone, and once per audience; the decision panel per socket.
SHARED_PARTIALS = ("live", "consequence_heading", "successor")
AUDIENCE_PARTIALS = ("you", "decision_bar")


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
    """One socket's part of an update: partials shared with others, and the panel's controls."""

    parts: tuple[str, ...]
    mode: tuple[str, str]

    @property
    def html(self) -> str:
        return "".join(self.parts)


def render_updates(proposal_id, viewers: list[Viewer]) -> dict[str, Update | None]:
    """Each socket's update ({channel name: Update}), or None for a socket whose person may no longer
    see the proposal (signed out, device reset, no longer a member of its tenant, or it is gone)."""
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
    groups = threshold_groups(proposal)
    in_groups = defaultdict(set)
    for user_id, group_id in GroupMembership.objects.filter(
        group__in=groups.values(), user_id__in={user.pk for _, user in readers}
    ).values_list("user_id", "group_id"):
        in_groups[user_id].add(group_id)
    standing_in = functools.cache(lambda: stand_in_users(proposal))

    @functools.cache
    def deciding_groups(user) -> frozenset:
        """As the page decides (selectors.capacity_for): a person the escalation step added fills any
        slot, a delegate the slots their delegator lends. Asked only where the eligibility rule gets to
        groups, so compliance staff and the principal cost no query."""
        if user.pk in standing_in():
            return frozenset(group.id for group in groups.values())
        if in_groups[user.pk]:
            return frozenset(in_groups[user.pk])
        _, lent = delegated_groups(proposal, user, groups)
        return frozenset(groups[slug].id for slug in lent)

    live = live_context(proposal, groups)
    shared = {
        **live,
        "successor": Proposal.objects.filter(supersedes=proposal).only("id", "state", "summary").first(),
        "oob": True,
    }
    shared_html = "".join(
        render_to_string(f"approvals/detail.html#{name}", shared) for name in SHARED_PARTIALS
    )
    closed_reason = functools.cache(lambda: lifecycle.closed_reason(proposal))
    label = consequence_label(proposal)
    # What the decision panels need beyond the page's reads, read once for every socket.
    break_glass_rule = functools.cache(lambda: rule_for_proposal(proposal))
    passkey_owners = functools.cache(lambda: passkeys.owners_among({user.pk for _, user in readers}))
    provider = functools.cache(lambda: vote_step_up.confirms_at_provider(proposal.tenant_id))
    audiences: dict[tuple, str] = {}
    for viewer, user in readers:
        membership = memberships[user.pk]
        why_not = ineligibility_from(
            proposal,
            user.pk,
            membership.role,
            is_principal=functools.partial(_is_principal, proposal, membership),
            in_a_group=lambda user=user: bool(deciding_groups(user)),
        )
        vote = my_vote(live, user.pk)
        mode = decision_mode_from(
            proposal,
            user.pk,
            live,
            why_not,
            # services.decisions.may_revoke's rule, over the votes the page read anyway
            may_revoke=functools.partial(_may_revoke, membership, live, user.pk),
            role=functools.partial(getattr, membership, "role"),
            closed_reason=closed_reason,
        )
        my_groups = [g for g in groups.values() if g.id in deciding_groups(user)] if why_not is None else []
        audience = (mode, tuple(g.id for g in my_groups), vote.verdict if vote else None)
        if audience not in audiences:
            context = {
                "proposal": proposal,
                "progress": live["progress"],
                "why": {"my_groups": my_groups},
                "decision_panel": {
                    "mode": mode[0],
                    "why_not": mode[1],
                    "my_vote": vote,
                    "consequence_label": label,  # the bar's buttons name the amount, as the panel's do
                },
                "oob": True,
            }
            audiences[audience] = "".join(
                render_to_string(f"approvals/detail.html#{name}", context) for name in AUDIENCE_PARTIALS
            )
        parts: tuple[str, ...] = (shared_html, audiences[audience])
        controls = (mode[0], proposal.state)
        if controls != viewer.sent_mode:
            # On connect (the page may be older than the socket), then only when the controls change: a
            # reviewer typing a reason keeps it while others vote (reviewer.js also keeps a panel whose
            # controls are the same).
            panel = decision_context(
                proposal,
                user,
                viewer.scope["session"],
                live,
                why_not,
                mode=mode,
                has_passkey=user.pk in passkey_owners(),
                break_glass_rule=break_glass_rule() if mode[0] == "vote" else None,
                provider=provider() if mode[0] == "vote" else None,
            )
            context = {
                "proposal": proposal,
                "decision_panel": panel,
                "oob": True,
                "csrf_token": viewer.csrf_token,
            }
            parts += (render_to_string("approvals/detail.html#decision", context),)
        updates[viewer.channel] = Update(parts=parts, mode=controls)
    return updates


def _is_principal(proposal: Proposal, membership: TenantMembership) -> bool:
    return (
        membership.principal_id == proposal.principal_id
    )  # selectors.is_principal, one membership per tenant


def _may_revoke(membership: TenantMembership, live: dict, user_id) -> bool:
    return membership.role == TenantMembership.Role.ADMIN or any(
        item["vote"].voter_id == user_id and item["vote"].verdict == Vote.Verdict.APPROVE
        for item in live["votes"]
    )


class LiveUpdates:
    """The proposal pages open in this process, and the updates under way for recent events."""

    RECENT = 64  # updates kept for sockets still to take their part (an event's sockets take it at once)

    def __init__(self):
        self.open: dict = defaultdict(dict)  # proposal id -> {channel name: consumer}
        # (proposal id, event id) -> (channel names still to take their part, task); an entry goes when
        # its last socket took its part, or as the oldest of more than RECENT (a socket that never did).
        self.recent: OrderedDict = OrderedDict()

    def join(self, consumer) -> None:
        self.open[consumer.proposal_id][consumer.channel_name] = consumer

    def leave(self, consumer) -> None:
        sockets = self.open.get(consumer.proposal_id, {})
        sockets.pop(consumer.channel_name, None)
        if not sockets:
            self.open.pop(consumer.proposal_id, None)

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
