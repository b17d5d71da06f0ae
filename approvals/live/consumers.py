"""WebSockets of the reviewer pages: ws/queue/ (the queue and the watching list) and ws/proposals/<id>/.

Thin on purpose. connect() authenticates (session user, verified with a one-time code, member of the
tenant), registers the socket as a listener of its groups (lib/group_listeners.py: a change nobody
listens to is not broadcast), joins them and accepts last; anyone else is closed without a handshake.
Right after accepting, and on every `proposal.changed` event (a hint to re-read), the consumer reads the
database and sends the page's own partials with hx-swap-oob, rendered from the same templates and page
builders as the views. The send on connect is what keeps a page true after a reconnect: events sent while
the socket was down are lost, and one may slip between the page load and the connect. A proposal page's
update is made once per event for all the page sockets of the process (approvals/live/fanout.py), which
checks each socket's person again.

The pages vote with their HTTP form. The socket also accepts a vote as a JSON message (for a client
without forms): validated by schemas.VoteMessage, authorized again per message, and written through
services.votes.cast_vote, the same service as the form (its step-up is `otp_code` or `passkey`, the
browser's answer to this vote's challenge); a refusal comes back as
{"type": "error", "error": {code, message, field}}.
"""

import asyncio
import json
import time
import uuid
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.http import QueryDict
from django.template.loader import render_to_string
from pydantic import ValidationError

from approvals import events
from approvals import stepup as vote_step_up
from approvals.live import trace
from approvals.live.fanout import Viewer, live_updates, verified_user
from approvals.schemas import VoteMessage
from approvals.selectors import proposal_for_user
from approvals.services.page_watchers import stop_watching, watch
from approvals.services.votes import cast_vote, check_words
from approvals.web.list_pages import queue_context, watching_context
from approvals.web.lists import LIST_PAGES
from approvals.web.pages import page_hash
from lib import group_listeners as listeners
from lib.errors import NotFound, ServiceError, error_body
from tenants.queries import tenant_ids_of

# The close code of a socket whose person lost access since it opened (signed out, deprovisioned, removed
# from the tenant): the page says so instead of "reconnecting", and htmx does not reconnect (4000-4999 are
# the application's own codes; htmx retries only 1006, 1011, 1012 and 1013).
ACCESS_ENDED = 4403

# A proposal socket re-reads its person's facts at the first event after this long, whatever it was
# told: the backstop for an invalidation lost on the way (channels-redis drops messages to a full
# channel, and a Redis outage loses those sent during it).
FACTS_MAX_AGE = 60.0
# A rendered message is used only if it was read this long after the socket's facts were read on
# connect or after an invalidation: the processes' clocks may differ by up to this much (one machine's,
# or NTP-synchronized ones).
CLOCK_MARGIN = 0.5


def _error(code: str, message: str, field: str | None = None, **extra) -> dict:
    return {"type": "error", **extra, **error_body(code, message, field)}


class ReviewerSocket(AsyncJsonWebsocketConsumer):
    """What both sockets share: authentication, joining groups, and votes."""

    user: Any  # the verified person, set by authorize()

    async def connect(self):
        groups = await database_sync_to_async(self.authorize_and_listen)()
        if groups is None:
            await self.close()
            return
        try:
            self.groups = groups  # websocket_disconnect leaves these
            for group in groups:
                await self.channel_layer.group_add(group, self.channel_name)
            await self.joined()
        except BaseException:  # the socket fails to open, and no disconnect will come for it
            await self.stop_listening()
            raise
        await self.accept()
        await self.send_current()

    def authorize_and_listen(self) -> list[str] | None:
        """authorize(), then this socket registered as listening on every group it joins (runs in a
        thread): before it joins them and reads the page, so a change committed after that read is sent
        to it (lib/group_listeners.py). The groups to join, or None to refuse the connection."""
        groups = self.authorize()
        if groups is None:
            return None
        # Told when what this socket knows of its person may have changed (approvals/live/invalidation.py).
        groups = [
            *groups,
            events.person_group(self.user.pk),
            events.session_group(self.scope["session"].session_key or ""),  # authorize() checked it
        ]
        self.listening = [*groups, *self.listened_elsewhere()]
        listeners.join(self.channel_name, self.listening)
        return groups

    def listened_elsewhere(self) -> list[str]:
        """Groups this socket's updates come from that it does not join itself."""
        return []

    async def stop_listening(self) -> None:
        listening, self.listening = getattr(self, "listening", []), []
        if listening:
            await sync_to_async(listeners.leave, thread_sensitive=False)(self.channel_name, listening)

    async def disconnect(self, code):
        await self.stop_listening()

    async def joined(self) -> None:
        """After the socket's groups were joined, before its first read."""

    async def send_current(self) -> None:
        """Send the page's partials as they are now, or close the socket if the person lost access."""
        html = await database_sync_to_async(self.render_current)()
        if html is None:
            await self.close(code=ACCESS_ENDED)
        else:
            await self.send(text_data=html)

    def authorize(self) -> list[str] | None:
        """The groups to join, or None to refuse the connection (runs in a thread)."""
        raise NotImplementedError

    def render_current(self) -> str | None:
        """The page's partials now (runs in a thread), or None when the person may no longer see them."""
        raise NotImplementedError

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        try:
            content = json.loads(text_data or "")
        except ValueError:
            await self.send_json(_error("bad_json", 'send a JSON object, e.g. {"type": "vote", ...}'))
            return
        await self.receive_json(content)

    async def receive_json(self, content, **kwargs):
        kind = content.get("type") if isinstance(content, dict) else None
        handler = self.handlers.get(kind) if isinstance(kind, str) else None  # a list is unhashable
        if handler is None:
            await self.send_json(
                _error(
                    "unknown_type",
                    f"unknown message type {kind!r}; this socket accepts: "
                    + ", ".join(sorted(self.handlers)),
                )
            )
            return
        await handler(self, content)

    async def handle_vote(self, content):
        try:
            message = VoteMessage.model_validate(content)
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(part) for part in first["loc"]) or None
            await self.send_json(
                _error("invalid_message", f"{field}: {first['msg']}", field, in_reply_to="vote")
            )
            return
        reply = await database_sync_to_async(self._vote)(message)
        await self.send_json(reply)

    def _vote(self, message: VoteMessage) -> dict:
        user = verified_user(self.scope)  # the session may have ended since connect()
        if user is None:
            return _error("not_verified", "sign in again with your one-time code", in_reply_to="vote")
        try:
            proposal_id = uuid.UUID(message.proposal_id)
        except ValueError:  # as unknown as another tenant's proposal
            return _error("not_found", "no such proposal", in_reply_to="vote")
        session = self.scope["session"]
        try:
            proposal = proposal_for_user(proposal_id, user)
            check_words(message.verdict, reason=message.reason)  # before the code is checked, and spent
            vote = cast_vote(
                proposal.id,
                user,
                verdict=message.verdict,
                digest_seen=message.digest,
                reason=message.reason,
                step_up=vote_step_up.step_up_for(
                    user,
                    message.otp_code,
                    session,
                    passkey=message.passkey,
                    proposal=proposal,
                    digest=message.digest,
                    reread=True,
                ),
                page_hash=page_hash(proposal),
            )
        except ServiceError as error:
            return {"type": "error", "in_reply_to": "vote", **error.as_dict()}
        finally:
            if session.modified:  # a good code refreshes the step-up time
                session.save()
        proposal.refresh_from_db(fields=["state"])
        return {
            "type": "vote.recorded",
            "proposal_id": str(proposal.id),
            "verdict": vote.verdict,
            "state": proposal.state,
        }

    handlers = {"vote": handle_vote}

    def _csrf_token(self) -> str:
        """For forms in partials sent over the socket: the browser's CSRF cookie value is a valid token."""
        return self.scope.get("cookies", {}).get(settings.CSRF_COOKIE_NAME, "")


def list_min_interval() -> float:
    """Seconds between two reads of a queue socket's list, however often its tenants change."""
    return getattr(settings, "LIVE_LIST_MIN_INTERVAL", 1.0)


_pause = asyncio.sleep  # (a test holds it to see which hints one read answers)


class QueueConsumer(ReviewerSocket):
    """The queue (or, with ?view=watching, the watching list) of one person, with their filters.

    Every change of a proposal in the person's tenants is a hint to read the list again, and an agent
    making many calls makes many: the socket reads at once when its last read is LIST_MIN_INTERVAL old,
    else once when it is (every hint that comes meanwhile is answered by that read, which starts after
    it). So an open queue tab costs at most one read a second, not one per proposal; the page's own
    socket (ProposalConsumer) is the one that shows a change at once. A change of the person's access
    is read at once (facts_changed)."""

    def authorize(self) -> list[str] | None:
        user = verified_user(self.scope)
        if user is None:
            return None
        tenant_ids = tenant_ids_of(user)
        self.user, self.tenant_ids = user, set(tenant_ids)
        self.next_read: asyncio.Task | None = None  # the read that will answer the hints so far
        self.last_read = time.monotonic()  # connect() reads the list right after this
        query = QueryDict(self.scope.get("query_string", b""))
        self.view = "watching" if query.get("view") == "watching" else "queue"
        self.params = {
            key: query.get(key)
            for key in ("q", "tenant", "agent", "policy", "risk", "state", "after", "opened")
            if query.get(key)
        }
        return [events.tenant_group(tenant_id) for tenant_id in tenant_ids] or None

    async def proposal_changed(self, event):
        if self.next_read is None:  # else that read, not yet started, answers this hint too
            wait = max(0.0, self.last_read + list_min_interval() - time.monotonic())
            self.next_read = asyncio.create_task(self.read_after(wait))

    async def read_after(self, wait: float) -> None:
        await _pause(wait)
        self.next_read = None  # a hint from now on may be of a change this read does not see
        self.last_read = time.monotonic()
        await self.send_current()

    async def facts_changed(self, event):
        await self.send_current()  # closes if the person's access ended

    async def disconnect(self, code):
        next_read = getattr(self, "next_read", None)
        if next_read is not None:
            next_read.cancel()
        await super().disconnect(code)

    def render_current(self) -> str | None:
        if verified_user(self.scope) is None or not self.tenant_ids <= set(tenant_ids_of(self.user)):
            # Signed out, or removed from a tenant since connecting (a directory's deprovisioning ends
            # that tenant's access even for a person another tenant keeps): the page closes and says so.
            return None
        build = watching_context if self.view == "watching" else queue_context
        context = build(self.user, self.params)
        context.update(list_page=LIST_PAGES[self.view], oob=True)
        return render_to_string("approvals/proposal_list.html#list", context)


class ProposalConsumer(ReviewerSocket):
    """One proposal page: state, quorum and votes live; the decision panel when its controls change.
    An event's update is rendered once per process and audience, not per socket (approvals/live/fanout.py).
    The proposal's group messages reach the socket through its process's channel
    (approvals/live/process_channel.py), not one of its own; the socket's channel is in its person's and
    session's groups only."""

    def authorize(self) -> list[str] | None:
        user = verified_user(self.scope)
        if user is None:
            return None
        try:
            proposal = proposal_for_user(self.scope["url_route"]["kwargs"]["proposal_id"], user)
        except NotFound:
            return None
        self.user, self.proposal_id = user, proposal.id
        # How the proposal's messages name the proposal and this person (compared for every message of the
        # process's channel: the strings are made once, not per message and socket).
        self.proposal_key, self.person_key = str(proposal.id), str(user.pk)
        # Its updates one at a time, in the order they came: the process's channel's receiver hands it the
        # proposal's messages beside the socket's own (facts_changed, on its own channel).
        self.handling = asyncio.Lock()
        self.closed = False
        # the decision panel's controls, as last sent (the first send includes it)
        self.mode: tuple[str, str] | None = None
        # When this socket's facts were read on connect or after its person's facts changed (time.time()
        # as the read began; None: not yet, the next event re-reads): a message read before that may show
        # what the person no longer may see. And when it last read them by this process's clock.
        self.trusted_from: float | None = None
        self.facts_checked = 0.0
        # When what the page shows was read (time.time() as the read of the last update sent began): a
        # message read before that is older than the page (one rendered before its commit may arrive
        # after a later change's), so the socket re-reads rather than show an older state.
        self.shown_read_at = 0.0
        # Before the socket joins the group and reads the page: a change committed after that read is
        # rendered for this person (or is a hint); one committed before it is in what the read shows.
        watch(proposal.id, user.pk, self.channel_name)
        return []

    def listened_elsewhere(self) -> list[str]:
        # the proposal's messages come through the process's channel (process_channel.py)
        return [events.proposal_group(self.proposal_id)]

    async def joined(self) -> None:
        await live_updates.join(self)

    async def disconnect(self, code):
        if getattr(self, "proposal_id", None) is not None:
            self.closed = True
            await live_updates.leave(self)
            await database_sync_to_async(stop_watching)(self.channel_name)
        await super().disconnect(code)

    async def proposal_changed(self, event):
        if event.get("proposal_id") != self.proposal_key:
            return
        received = trace.now() if trace.enabled() else 0.0
        async with self.handling:
            if self.closed:
                return
            html = self.from_message(event)
            if html is not None:
                await self.send(text_data=html)
            else:
                await self.send_update(event.get("event"))
        if received:
            trace.handled(event, "message" if html is not None else "read", received)

    async def facts_changed(self, event):
        """The person's session, device, memberships or account changed: re-read now (closing the socket
        if their access ended), and trust no message read before this."""
        async with self.handling:
            self.trusted_from = None
            await self.send_update(None)

    def from_message(self, event) -> str | None:
        """This socket's update out of a message rendered by the committing process (live/broadcast.py),
        or None when the socket must re-read: its facts are unknown, older than FACTS_MAX_AGE, or were
        read (on connect, or after an invalidation) later than the message was; what the page shows was
        read later than the message was (an older state arriving late); the message has no parts
        for its person (not a member when it was read) or its parts are malformed; or the decision panel's
        controls changed (the panel holds this socket's CSRF token and step-up state)."""
        if self.trusted_from is None or time.monotonic() - self.facts_checked > FACTS_MAX_AGE:
            return None
        read_at, shared, audiences = event.get("read_at"), event.get("shared"), event.get("audiences")
        people = event.get("people")
        if not isinstance(read_at, float) or read_at < max(
            self.trusted_from + CLOCK_MARGIN, self.shown_read_at
        ):
            return None
        if not (isinstance(shared, str) and isinstance(audiences, list) and isinstance(people, dict)):
            return None
        index = people.get(self.person_key)
        if not isinstance(index, int) or not 0 <= index < len(audiences):
            return None
        entry = audiences[index]
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)):
            return None
        html, controls = entry
        if not isinstance(controls, list) or tuple(controls) != self.mode:
            return None
        self.shown_read_at = read_at
        return shared + html

    async def send_current(self) -> None:
        async with self.handling:
            await self.send_update(None)

    async def send_update(self, event_id: str | None) -> None:
        """This socket's part of the event's update, read now, or close it if the person lost access."""
        update = await live_updates.update_for(self, event_id)
        if update is not None and self.trusted_from is not None and update.read_at < self.trusted_from:
            # another socket's update for this event was read before this socket last re-read (after an
            # invalidation it heard of): it may predate that, so this one reads again
            update = await live_updates.update_for(self, None)
        if update is None:
            await self.close(code=ACCESS_ENDED)
            return
        self.mode = update.mode
        self.shown_read_at = max(self.shown_read_at, update.read_at)
        if self.trusted_from is None:
            self.trusted_from = update.read_at
        self.facts_checked = time.monotonic()
        await self.send(text_data=update.html)

    def viewer(self) -> Viewer:
        return Viewer(self.channel_name, self.scope, self._csrf_token(), self.mode)
