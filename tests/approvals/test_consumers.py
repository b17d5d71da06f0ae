"""The WebSockets through the real ASGI app (origin check, session and auth middleware, URL router), with
a session cookie from a real sign-in (password and one-time code)."""

import asyncio
import json
import uuid
from datetime import timedelta

import pytest
import time_machine
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.backends.db import SessionStore
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts import stepup
from accounts.stepup import step_up_for
from approvals.live import consumers
from approvals.models import Proposal
from approvals.services.votes import cast_vote
from approvals.states import State
from audit.models import AuditEvent, Verb
from tests import factories
from tests.factories import PASSWORD, submit, totp_code

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT = 5  # seconds: an upper bound for a message to arrive, not a wait


@pytest.fixture(autouse=True)
def _own_channel_prefix(settings):
    """On Redis, other test runs may share the server: our own prefix keeps their events out."""
    layer = settings.CHANNEL_LAYERS["default"]
    if "redis" in layer["BACKEND"]:
        settings.CHANNEL_LAYERS = {
            "default": {**layer, "CONFIG": {**layer["CONFIG"], "prefix": f"test-{uuid.uuid4().hex[:8]}"}}
        }


def sign_in(user) -> str:
    """Sign in through the login view with a real code; returns the session id."""
    client = Client()
    response = client.post(
        reverse("login"),
        {"username": user.get_username(), "password": PASSWORD, "otp_token": totp_code(user)},
    )
    assert response.status_code == 302, response.content
    return client.cookies["sessionid"].value


def password_only_session(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


# Where the reviewer's page was served from: the socket's Host, and the Origin its page sends.
HOST = "127.0.0.1:8000"


def socket(
    path: str, session_id: str | None = None, origin: str | None = f"http://{HOST}"
) -> WebsocketCommunicator:
    from reviewer.asgi import application

    headers = [(b"host", HOST.encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    if session_id:
        headers.append((b"cookie", f"sessionid={session_id}; csrftoken=test-csrf".encode()))
    return WebsocketCommunicator(application, path, headers=headers)


def proposal_path(proposal) -> str:
    return f"/ws/proposals/{proposal.id}/"


async def connected(path: str, session_id: str | None) -> WebsocketCommunicator:
    """A socket past its first message (the page's partials as they are at connect time)."""
    communicator, _ = await connected_with_state(path, session_id)
    return communicator


async def connected_with_state(path: str, session_id: str | None) -> tuple[WebsocketCommunicator, str]:
    communicator = socket(path, session_id)
    ok, _ = await communicator.connect(timeout=TIMEOUT)
    assert ok, f"{path} refused the connection"
    state = await communicator.receive_from(timeout=TIMEOUT)
    assert isinstance(state, str)  # the pages' updates are text frames
    return communicator, state


async def refused(path: str, session_id: str | None, **socket_kwargs) -> bool:
    communicator = socket(path, session_id, **socket_kwargs)
    ok, _ = await communicator.connect(timeout=TIMEOUT)
    await communicator.disconnect()  # end the application instance either way, with its database work
    return not ok


def vote(proposal, **fields) -> dict:
    return {
        "type": "vote",
        "proposal_id": str(proposal.id),
        "verdict": "approve",
        "digest": proposal.action_digest,
        **fields,
    }


@pytest.fixture
def proposal(agent, refund_policy, requester, reviewer_a, reviewer_b, outsider):
    return submit(agent)


# ---------------------------------------------------------------------------------------------------
# Who may connect


async def test_anonymous_and_password_only_sockets_are_refused(proposal, reviewer_a):
    half = await database_sync_to_async(password_only_session)(reviewer_a)
    for path in ("/ws/queue/", proposal_path(proposal)):
        assert await refused(path, None)
        assert await refused(path, half)


@pytest.mark.parametrize(
    "origin",
    [
        "http://127.0.0.1:9999",  # another port: another site
        "https://127.0.0.1",  # another scheme and port
        "http://localhost:8300",
        "http://127.0.0.1:8000.evil.example",
        "http://evil.example",
        "null",
        None,  # no Origin at all
    ],
)
async def test_a_page_of_another_origin_cannot_open_a_reviewers_socket(proposal, reviewer_a, origin):
    """Scheme, host and port of the Origin are compared, not the host alone."""
    session = await database_sync_to_async(sign_in)(reviewer_a)
    assert await refused(proposal_path(proposal), session, origin=origin)
    assert await refused("/ws/queue/", session, origin=origin)


async def test_the_own_origin_and_the_public_base_url_may_open_a_socket(proposal, reviewer_a, settings):
    settings.REVIEWER_ISSUER = "https://reviewer.example"
    session = await database_sync_to_async(sign_in)(reviewer_a)
    for origin in (f"http://{HOST}", "https://reviewer.example", "https://reviewer.example:443"):
        assert not await refused(proposal_path(proposal), session, origin=origin), origin


async def test_an_outsider_cannot_open_another_tenants_proposal(proposal, outsider):
    session = await database_sync_to_async(sign_in)(outsider)
    assert await refused(proposal_path(proposal), session)
    assert await refused(f"/ws/proposals/{uuid.uuid4()}/", session)


async def test_an_outsiders_queue_hears_nothing_of_another_tenant(
    agent, proposal, reviewer_a, reviewer_b, outsider
):
    insider = await connected("/ws/queue/", await database_sync_to_async(sign_in)(reviewer_b))
    stranger = await connected("/ws/queue/", await database_sync_to_async(sign_in)(outsider))
    await database_sync_to_async(submit)(agent, summary="Another refund")
    update = await insider.receive_from(timeout=TIMEOUT)  # the event happened, and reached the tenant
    assert "Another refund" in update
    assert await stranger.receive_nothing(timeout=0.5)
    await insider.disconnect()
    await stranger.disconnect()


# ---------------------------------------------------------------------------------------------------
# Votes over the socket: the same service and the same refusals as the form


async def test_a_valid_vote_over_the_socket_decides(proposal, reviewer_a):
    communicator = await connected(proposal_path(proposal), await database_sync_to_async(sign_in)(reviewer_a))
    code = await database_sync_to_async(totp_code)(reviewer_a)
    reply = await reply_to(communicator, vote(proposal, otp_code=code, reason="checked the ticket"))
    assert reply == {
        "type": "vote.recorded",
        "proposal_id": str(proposal.id),
        "verdict": "approve",
        "state": "approved",
    }
    assert (await database_sync_to_async(Proposal.objects.get)(pk=proposal.pk)).state == State.APPROVED
    await communicator.disconnect()


async def reply_to(communicator, message) -> dict:
    """The JSON reply to one message (update partials may arrive in between)."""
    await communicator.send_json_to(message)
    while True:
        text = await communicator.receive_from(timeout=TIMEOUT)
        if text.startswith("{"):
            return json.loads(text)


async def test_a_vote_for_another_digest_is_refused(proposal, reviewer_a):
    communicator = await connected(proposal_path(proposal), await database_sync_to_async(sign_in)(reviewer_a))
    code = await database_sync_to_async(totp_code)(reviewer_a)
    reply = await reply_to(communicator, vote(proposal, digest="sha256:" + "0" * 64, otp_code=code))
    assert reply["type"] == "error" and reply["error"]["code"] == "wrong_digest"
    assert "the action changed since you loaded it" in reply["error"]["message"]
    await communicator.disconnect()


async def test_compliance_staff_can_watch_a_proposal_but_a_vote_over_the_socket_is_refused(
    proposal, compliance
):
    communicator = await connected(proposal_path(proposal), await database_sync_to_async(sign_in)(compliance))
    code = await database_sync_to_async(totp_code)(compliance)
    reply = await reply_to(communicator, vote(proposal, otp_code=code))
    assert reply["type"] == "error" and reply["error"]["code"] == "not_eligible"
    assert not await database_sync_to_async(proposal.votes.exists)()
    await communicator.disconnect()


async def test_a_vote_after_expiry_is_refused_by_the_server_clock(proposal, reviewer_a):
    communicator = await connected(proposal_path(proposal), await database_sync_to_async(sign_in)(reviewer_a))
    await database_sync_to_async(Proposal.objects.filter(pk=proposal.pk).update)(
        expires_at=factories.in_seconds(-1)
    )  # the clock passed; no sweeper has run
    code = await database_sync_to_async(totp_code)(reviewer_a)
    reply = await reply_to(communicator, vote(proposal, otp_code=code))
    assert reply["error"]["code"] == "expired" and "nothing will execute" in reply["error"]["message"]
    assert (await database_sync_to_async(Proposal.objects.get)(pk=proposal.pk)).state == State.EXPIRED
    await communicator.disconnect()


async def test_a_rejection_without_a_reason_keeps_its_code_for_the_corrected_vote(proposal, reviewer_a):
    communicator = await connected(proposal_path(proposal), await database_sync_to_async(sign_in)(reviewer_a))
    code = await database_sync_to_async(totp_code)(reviewer_a)
    reply = await reply_to(communicator, vote(proposal, verdict="reject", otp_code=code))
    assert reply["error"]["code"] == "reason_required" and reply["error"]["field"] == "reason"
    reply = await reply_to(communicator, vote(proposal, verdict="reject", otp_code=code, reason="duplicate"))
    assert reply["type"] == "vote.recorded" and reply["state"] == "rejected"
    failures = AuditEvent.objects.filter(verb=Verb.STEP_UP_FAILED)
    assert not await database_sync_to_async(failures.exists)()
    await communicator.disconnect()


async def test_a_vote_without_a_code_is_refused_when_each_vote_needs_one(proposal, reviewer_a):
    communicator = await connected(proposal_path(proposal), await database_sync_to_async(sign_in)(reviewer_a))
    reply = await reply_to(communicator, vote(proposal))
    assert reply["error"] == {
        "code": "step_up_required",
        "message": "this vote needs a fresh one-time code",
        "field": "otp_code",
    }
    await communicator.disconnect()


def stamp_step_up(session_id: str, seconds_ago: int) -> None:
    session = SessionStore(session_key=session_id)
    with time_machine.travel(timezone.now() - timedelta(seconds=seconds_ago), tick=False):
        stepup.mark_fresh(session)
    session.save()


@pytest.mark.parametrize("seconds_ago, accepted", [(3600, False), (10, True)])
async def test_a_step_up_window_counts_only_while_it_is_fresh(
    tenant, agent, requester, reviewer_a, seconds_ago, accepted
):
    await database_sync_to_async(factories.make_policy)(tenant, "refunds", step_up="300")
    proposal = await database_sync_to_async(submit)(agent)
    session = await database_sync_to_async(sign_in)(reviewer_a)
    await database_sync_to_async(stamp_step_up)(session, seconds_ago)
    communicator = await connected(proposal_path(proposal), session)
    reply = await reply_to(communicator, vote(proposal))
    if accepted:
        assert reply["type"] == "vote.recorded" and reply["state"] == "approved"
    else:
        assert reply["error"]["code"] == "step_up_required"
    await communicator.disconnect()


async def test_a_vote_on_another_tenants_proposal_is_not_found(tenant, other_tenant, proposal, outsider):
    await database_sync_to_async(factories.make_policy)(other_tenant, "refunds")
    theirs = await database_sync_to_async(submit)(
        await database_sync_to_async(factories.make_agent)(other_tenant, slug="globex-agent")
    )
    communicator = await connected("/ws/queue/", await database_sync_to_async(sign_in)(outsider))
    code = await database_sync_to_async(totp_code)(outsider)
    reply = await reply_to(communicator, vote(proposal, otp_code=code))
    assert reply["error"] == {"code": "not_found", "message": "no such proposal", "field": None}
    # The same socket can vote on its own tenant's proposal: authorization is per message.
    reply = await reply_to(communicator, vote(theirs, otp_code=code))
    assert reply["type"] == "vote.recorded"
    await communicator.disconnect()


async def test_malformed_messages_get_a_typed_error(proposal, reviewer_a):
    communicator = await connected(proposal_path(proposal), await database_sync_to_async(sign_in)(reviewer_a))
    reply = await reply_to(communicator, {"type": "approve_everything"})
    assert reply["error"]["code"] == "unknown_type" and "accepts: vote" in reply["error"]["message"]
    reply = await reply_to(
        communicator, {"type": "vote", "proposal_id": str(proposal.id), "verdict": "approve"}
    )
    assert reply["error"]["code"] == "invalid_message" and reply["error"]["field"] == "digest"
    reply = await reply_to(communicator, vote(proposal, verdict="maybe"))
    assert reply["error"]["code"] == "invalid_message" and reply["error"]["field"] == "verdict"
    reply = await reply_to(communicator, vote(proposal, proposal_id="not-a-uuid"))
    assert reply["error"]["code"] == "not_found"
    await communicator.send_to(text_data="{not json")
    assert json.loads(await communicator.receive_from(timeout=TIMEOUT))["error"]["code"] == "bad_json"
    await communicator.disconnect()


async def test_a_message_type_that_is_not_text_gets_a_typed_error_and_the_socket_stays_open(
    proposal, reviewer_a
):
    communicator = await connected(proposal_path(proposal), await database_sync_to_async(sign_in)(reviewer_a))
    reply = await reply_to(communicator, {"type": ["vote"]})
    assert reply["error"]["code"] == "unknown_type"
    reply = await reply_to(communicator, {"type": "approve_everything"})  # still answering
    assert reply["error"]["code"] == "unknown_type"
    await communicator.disconnect()


# ---------------------------------------------------------------------------------------------------
# Live updates: the page's own partials, out of band


async def test_a_socket_sends_the_current_state_when_it_connects(agent, refund_policy, requester, reviewer_a):
    """So a page that reconnects re-reads whatever it missed while the socket was down."""
    session = await database_sync_to_async(sign_in)(reviewer_a)
    proposal = await database_sync_to_async(submit)(agent, summary="Missed while offline")
    queue, state = await connected_with_state("/ws/queue/", session)
    assert '<section id="queue-list"' in state and 'hx-swap-oob="true"' in state
    assert f'href="/proposals/{proposal.id}/"' in state
    watching, state = await connected_with_state("/ws/queue/?view=watching", session)
    assert '<section id="watching-list"' in state and 'hx-swap-oob="true"' in state
    page, state = await connected_with_state(proposal_path(proposal), session)
    assert '<section id="live"' in state and '<section id="decision"' in state
    for communicator in (queue, watching, page):
        await communicator.disconnect()


async def test_a_viewer_sees_another_reviewers_vote_arrive(tenant, agent, requester, reviewer_a, reviewer_b):
    await database_sync_to_async(factories.make_policy)(
        tenant, "refunds", thresholds=[{"group": "finance", "count": 2}]
    )
    proposal = await database_sync_to_async(submit)(agent)
    viewer = await connected(proposal_path(proposal), await database_sync_to_async(sign_in)(reviewer_b))
    step_up = await database_sync_to_async(step_up_for)(
        reviewer_a, await database_sync_to_async(totp_code)(reviewer_a)
    )
    await database_sync_to_async(cast_vote)(
        proposal.id, reviewer_a, verdict="approve", digest_seen=proposal.action_digest, step_up=step_up
    )
    update = await viewer.receive_from(timeout=TIMEOUT)
    assert '<section id="live"' in update and 'hx-swap-oob="true"' in update
    assert "Alice approved" in update and "1 of 2" in update
    assert 'id="decision"' not in update  # the viewer's half-typed form stays as it is
    await viewer.disconnect()


async def test_the_decision_panel_follows_when_the_proposal_closes(proposal, reviewer_a, reviewer_b):
    viewer = await connected(proposal_path(proposal), await database_sync_to_async(sign_in)(reviewer_b))
    step_up = await database_sync_to_async(step_up_for)(
        reviewer_a, await database_sync_to_async(totp_code)(reviewer_a)
    )
    await database_sync_to_async(cast_vote)(
        proposal.id,
        reviewer_a,
        verdict="reject",
        digest_seen=proposal.action_digest,
        step_up=step_up,
        reason="duplicate",
    )
    update = await viewer.receive_from(timeout=TIMEOUT)
    assert (
        "Rejected" in update and '<section id="decision"' in update and "No decision is open here" in update
    )
    await viewer.disconnect()


async def test_a_new_proposal_appears_in_an_open_queue(agent, refund_policy, requester, reviewer_a):
    queue = await connected("/ws/queue/?risk=", await database_sync_to_async(sign_in)(reviewer_a))
    proposal = await database_sync_to_async(submit)(agent, summary="Fresh refund request")
    update = await queue.receive_from(timeout=TIMEOUT)
    assert '<section id="queue-list"' in update and 'hx-swap-oob="true"' in update
    assert f'href="/proposals/{proposal.id}/"' in update and "1 proposal waiting for you" in update
    await queue.disconnect()


async def test_a_burst_of_changes_costs_an_open_queue_one_read_that_shows_them_all(
    monkeypatch, agent, refund_policy, requester, reviewer_a
):
    reads: list = []
    render_current = consumers.QueueConsumer.render_current
    # Counts the read, then reads: append() is None, so `or` goes on to the real call.
    monkeypatch.setattr(
        consumers.QueueConsumer,
        "render_current",
        lambda self: reads.append(1) or render_current(self),  # type: ignore[func-returns-value]
    )
    held = asyncio.Event()  # the wait for the next read, held until every change has committed

    async def pause(seconds):
        await held.wait()

    monkeypatch.setattr(consumers, "_pause", pause)
    queue = await connected("/ws/queue/?risk=", await database_sync_to_async(sign_in)(reviewer_a))
    proposals = [await database_sync_to_async(submit)(agent, task_id=f"task-{n}") for n in range(5)]
    assert await queue.receive_nothing(timeout=0.5)  # five hints, no read yet
    held.set()
    update = await queue.receive_from(timeout=TIMEOUT)
    assert all(f'href="/proposals/{p.id}/"' in update for p in proposals)
    assert "5 proposals waiting for you" in update
    assert len(reads) == 2  # on connect, and one for the five changes
    assert await queue.receive_nothing(timeout=0.5)
    await queue.disconnect()


async def test_a_socket_stops_when_its_session_signs_out(proposal, reviewer_a, reviewer_b):
    session = await database_sync_to_async(sign_in)(reviewer_b)
    viewer = await connected(proposal_path(proposal), session)
    await database_sync_to_async(SessionStore(session_key=session).delete)()
    step_up = await database_sync_to_async(step_up_for)(
        reviewer_a, await database_sync_to_async(totp_code)(reviewer_a)
    )
    await database_sync_to_async(cast_vote)(
        proposal.id, reviewer_a, verdict="approve", digest_seen=proposal.action_digest, step_up=step_up
    )
    assert (await viewer.receive_output(timeout=TIMEOUT))["type"] == "websocket.close"
    await viewer.disconnect()
