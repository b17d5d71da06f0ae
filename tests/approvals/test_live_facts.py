"""A proposal page's socket keeps its person's facts (session, device, memberships) in memory and sends
the parts the committing process rendered (approvals/live/broadcast.py) without a read of its own; every
change to those facts reaches it as an event of its own, after which it re-reads, and closes if the
person's access ended. When it cannot be sure its facts are current it re-reads instead of trusting the
message."""

import time

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.contrib.sessions.backends.db import SessionStore
from django.db import transaction

from accounts.devices import reset_devices
from accounts.stepup import step_up_for
from approvals import events
from approvals.live import broadcast, consumers, fanout
from approvals.services.page_watchers import watch
from approvals.services.tenants import remove_group_member, remove_tenant_membership
from approvals.services.votes import cast_vote
from tenants.models import ApproverGroup, TenantMembership
from tests import factories
from tests.approvals.test_consumers import TIMEOUT, _own_channel_prefix, connected, proposal_path, sign_in  # noqa: F401
from tests.factories import submit, totp_code

pytestmark = pytest.mark.django_db(transaction=True)

VOTE_CONTROLS = 'value="approve"'


@pytest.fixture
def two_approvals(tenant):
    """Refunds need two finance approvals: a first vote changes the quorum, not anyone's controls."""
    return factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 2}]
    )


@pytest.fixture(autouse=True)
def one_clock(monkeypatch):
    """The test's processes share one clock: a message read after the socket's facts is newer, however
    soon after (in production a margin covers clocks of several machines)."""
    monkeypatch.setattr(consumers, "CLOCK_MARGIN", 0.0)


@pytest.fixture
def reads(monkeypatch) -> list:
    """The sockets' own reads: one entry (its number of sockets) per update a Daphne process read."""
    calls: list = []
    render_updates = fanout.render_updates

    def counted(proposal_id, viewers):
        calls.append(len(viewers))
        return render_updates(proposal_id, viewers)

    monkeypatch.setattr(fanout, "render_updates", counted)
    return calls


async def open_page(proposal, user):
    session = await database_sync_to_async(sign_in)(user)
    return session, await connected(proposal_path(proposal), session)


def vote(proposal, user, reason=""):
    cast_vote(
        proposal.id,
        user,
        verdict="approve",
        digest_seen=proposal.action_digest,
        reason=reason,
        step_up=step_up_for(user, totp_code(user)),
    )


async def test_a_vote_reaches_open_pages_with_no_read_of_their_own(
    reads, tenant, agent, two_approvals, requester, reviewer_a, reviewer_b
):
    proposal = await database_sync_to_async(submit)(agent)
    dora = await database_sync_to_async(factories.make_user)("dora", tenant=tenant, groups=["finance"])
    _, bob = await open_page(proposal, reviewer_b)
    _, other = await open_page(proposal, dora)
    reads.clear()
    await database_sync_to_async(vote)(proposal, reviewer_a)
    updates = [await s.receive_from(timeout=TIMEOUT) for s in (bob, other)]
    assert reads == []  # the committing process's parts, as they were rendered
    assert all("Alice approved" in update and VOTE_CONTROLS in update for update in updates)
    for s in (bob, other):
        await s.disconnect()


async def test_removed_from_the_group_while_the_page_is_open_the_next_event_shows_no_vote_controls(
    tenant, agent, two_approvals, requester, reviewer_a, reviewer_b, admin_user
):
    proposal = await database_sync_to_async(submit)(agent)
    _, bob = await open_page(proposal, reviewer_b)
    finance = await database_sync_to_async(ApproverGroup.objects.get)(tenant=tenant, slug="finance")

    await database_sync_to_async(remove_group_member)(finance, reviewer_b, actor=admin_user)
    told = await bob.receive_from(timeout=TIMEOUT)  # the membership's own event: read again at once
    assert VOTE_CONTROLS not in told

    await database_sync_to_async(vote)(proposal, reviewer_a)
    update = await bob.receive_from(timeout=TIMEOUT)
    assert "Alice approved" in update and VOTE_CONTROLS not in update
    await bob.disconnect()


@pytest.mark.parametrize("how", ["signed out", "device reset", "left the tenant", "deactivated"])
async def test_a_page_closes_when_its_persons_access_ends_with_no_proposal_event(
    how, tenant, agent, two_approvals, requester, reviewer_b, admin_user
):
    proposal = await database_sync_to_async(submit)(agent)
    session, bob = await open_page(proposal, reviewer_b)

    def end_access():
        if how == "signed out":
            SessionStore(session_key=session).delete()
        elif how == "device reset":
            reset_devices(reviewer_b, actor=admin_user)
        elif how == "left the tenant":
            remove_tenant_membership(tenant, reviewer_b, actor=admin_user)
        else:
            reviewer_b.is_active = False
            reviewer_b.save(update_fields=["is_active"])
            SessionStore(session_key=session).delete()  # as deprovisioning ends the sessions

    await database_sync_to_async(end_access)()
    assert await bob.receive_output(timeout=TIMEOUT) == {"type": "websocket.close", "code": 4403}


async def test_signing_out_closes_only_that_sessions_page(agent, two_approvals, requester, reviewer_b):
    proposal = await database_sync_to_async(submit)(agent)
    # the same person on two devices (each sign-in's code is a change of their device: signed in first)
    leaving_session = await database_sync_to_async(sign_in)(reviewer_b)
    staying_session = await database_sync_to_async(sign_in)(reviewer_b)
    leaving = await connected(proposal_path(proposal), leaving_session)
    staying = await connected(proposal_path(proposal), staying_session)
    await database_sync_to_async(SessionStore(session_key=leaving_session).delete)()
    assert await leaving.receive_output(timeout=TIMEOUT) == {"type": "websocket.close", "code": 4403}
    assert await staying.receive_nothing()
    await staying.disconnect()


async def watching(proposal, *users) -> None:
    """These people have the proposal's page open (a watcher row each, as their sockets would write)."""
    for user in users:
        await database_sync_to_async(watch)(proposal.id, user.pk, f"test-socket-{user.pk}")


async def rendered(proposal, **changes) -> dict:
    message = await database_sync_to_async(broadcast.rendered_message)(proposal.id)
    message.update(changes)
    return message


async def test_a_message_read_before_the_sockets_facts_is_not_trusted(
    reads, agent, two_approvals, requester, reviewer_b
):
    proposal = await database_sync_to_async(submit)(agent)
    _, bob = await open_page(proposal, reviewer_b)
    reads.clear()
    layer = get_channel_layer()
    assert layer is not None

    await layer.group_send(events.proposal_group(proposal.id), await rendered(proposal, read_at=0.0))
    assert VOTE_CONTROLS in await bob.receive_from(timeout=TIMEOUT)
    assert reads == [1]  # read again by the socket's process
    await bob.disconnect()


async def test_a_message_without_the_persons_parts_makes_the_socket_read_and_close(
    agent, two_approvals, requester, reviewer_b
):
    """Removed from the tenant between the socket's facts and the message (its own event lost): the
    message has no parts for them, so the socket reads, and closes."""
    proposal = await database_sync_to_async(submit)(agent)
    _, bob = await open_page(proposal, reviewer_b)
    message = await rendered(proposal, read_at=time.time() + 60)
    message["people"].pop(str(reviewer_b.pk))
    await database_sync_to_async(TenantMembership.objects.filter(user=reviewer_b).delete)()
    assert await bob.receive_output(timeout=TIMEOUT) == {"type": "websocket.close", "code": 4403}


async def test_facts_older_than_their_maximum_age_are_read_again(
    monkeypatch, reads, agent, two_approvals, requester, reviewer_b
):
    proposal = await database_sync_to_async(submit)(agent)
    _, bob = await open_page(proposal, reviewer_b)
    reads.clear()
    monkeypatch.setattr(consumers, "FACTS_MAX_AGE", -1.0)
    layer = get_channel_layer()
    assert layer is not None
    await layer.group_send(
        events.proposal_group(proposal.id), await rendered(proposal, read_at=time.time() + 60)
    )
    assert VOTE_CONTROLS in await bob.receive_from(timeout=TIMEOUT)
    assert reads == [1]
    await bob.disconnect()


async def test_the_committing_process_sends_each_audience_once_and_escapes_what_people_wrote(
    tenant, agent, two_approvals, requester, reviewer_a, reviewer_b, reviewer_c, compliance
):
    proposal = await database_sync_to_async(submit)(agent)
    dora = await database_sync_to_async(factories.make_user)("dora", tenant=tenant, groups=["finance"])
    await watching(proposal, reviewer_a, reviewer_b, compliance, dora)
    await database_sync_to_async(vote)(proposal, reviewer_a, reason="<script>alert(1)</script>")
    message = await rendered(proposal)
    assert "<script>alert(1)" not in message["shared"] and "&lt;script&gt;alert(1)" in message["shared"]
    audiences = [
        message["audiences"][message["people"][str(u.pk)]] for u in (reviewer_a, reviewer_b, compliance)
    ]
    assert VOTE_CONTROLS not in audiences[0][0]  # she voted
    assert VOTE_CONTROLS in audiences[1][0]
    assert VOTE_CONTROLS not in audiences[2][0]  # compliance staff do not vote
    assert message["people"][str(dora.pk)] == message["people"][str(reviewer_b.pk)]  # one audience, sent once


async def test_a_message_over_the_size_cap_is_sent_as_a_hint(settings, agent, two_approvals, reviewer_b):
    proposal = await database_sync_to_async(submit)(agent)
    await watching(proposal, reviewer_b)
    assert "shared" in await rendered(proposal)  # under the default cap
    settings.LIVE_MESSAGE_MAX_BYTES = 100
    message = await rendered(proposal)
    assert set(message) == {"type", "proposal_id", "event"}


@pytest.fixture
def renders(monkeypatch) -> list:
    """The committing process's renders of a page's message: whether each ran inside a transaction."""
    calls: list = []

    def recorded(proposal_id):
        calls.append(transaction.get_connection().in_atomic_block)
        return broadcast.rendered_message(proposal_id)

    monkeypatch.setattr(events, "_render", [recorded])
    return calls


async def test_a_vote_short_of_the_quorum_is_rendered_once_before_its_commit(
    renders, reads, agent, two_approvals, requester, reviewer_a, reviewer_b
):
    proposal = await database_sync_to_async(submit)(agent)
    _, bob = await open_page(proposal, reviewer_b)
    reads.clear()
    renders.clear()  # the proposal's intake
    await database_sync_to_async(vote)(proposal, reviewer_a)
    update = await bob.receive_from(timeout=TIMEOUT)
    assert renders == [True]  # inside the vote's transaction, and not again after its commit
    assert "Alice approved" in update and VOTE_CONTROLS in update  # it saw the transaction's own vote
    assert reads == []
    await bob.disconnect()


def announce_in(proposal, *, enclosed: bool, fail: bool) -> None:
    """events.proposal_changed(render_now=True) in a transaction (inside another with `enclosed`) that
    commits, or rolls back with `fail`."""

    def change():
        with transaction.atomic():
            events.proposal_changed(proposal, render_now=True)
            if fail:
                raise RuntimeError("rolled back")

    try:
        if enclosed:
            with transaction.atomic():
                change()
        else:
            change()
    except RuntimeError:
        pass


async def test_a_change_rendered_before_a_commit_that_never_came_is_never_sent(
    renders, agent, two_approvals, requester, reviewer_b
):
    proposal = await database_sync_to_async(submit)(agent)
    _, bob = await open_page(proposal, reviewer_b)
    renders.clear()  # the proposal's intake
    await database_sync_to_async(announce_in)(proposal, enclosed=False, fail=True)
    assert renders == [True]
    assert await bob.receive_nothing()
    await bob.disconnect()


async def test_inside_an_enclosing_transaction_the_message_is_rendered_after_the_commit(
    renders, agent, two_approvals, requester, reviewer_b
):
    """An enclosing transaction could still change the page after the announcement."""
    proposal = await database_sync_to_async(submit)(agent)
    _, bob = await open_page(proposal, reviewer_b)
    renders.clear()  # the proposal's intake
    await database_sync_to_async(announce_in)(proposal, enclosed=True, fail=False)
    assert VOTE_CONTROLS in await bob.receive_from(timeout=TIMEOUT)
    assert renders == [False]
    await bob.disconnect()


async def test_a_render_that_fails_before_the_commit_is_done_after_it(
    monkeypatch, agent, two_approvals, requester, reviewer_b
):
    calls: list = []

    def failing_inside(proposal_id):
        calls.append(transaction.get_connection().in_atomic_block)
        if calls[-1]:
            raise RuntimeError("render failed")
        return broadcast.rendered_message(proposal_id)

    monkeypatch.setattr(events, "_render", [failing_inside])
    proposal = await database_sync_to_async(submit)(agent)
    _, bob = await open_page(proposal, reviewer_b)
    calls.clear()  # the proposal's intake
    await database_sync_to_async(announce_in)(proposal, enclosed=False, fail=False)
    assert VOTE_CONTROLS in await bob.receive_from(timeout=TIMEOUT)
    assert calls == [True, False]
    await bob.disconnect()


async def test_a_message_older_than_what_the_page_shows_is_not_sent_the_socket_reads_instead(
    reads, agent, two_approvals, requester, reviewer_b
):
    """A change rendered before its commit may arrive after a later change's message."""
    proposal = await database_sync_to_async(submit)(agent)
    _, bob = await open_page(proposal, reviewer_b)
    reads.clear()
    layer, group = get_channel_layer(), events.proposal_group(proposal.id)
    assert layer is not None
    await layer.group_send(group, await rendered(proposal, read_at=time.time() + 60))
    assert VOTE_CONTROLS in await bob.receive_from(timeout=TIMEOUT)
    assert reads == []  # sent from the message
    older = await rendered(proposal, read_at=time.time() + 30)
    older["shared"] = "<p>OLDER STATE</p>"
    await layer.group_send(group, older)
    update = await bob.receive_from(timeout=TIMEOUT)
    assert "OLDER STATE" not in update and VOTE_CONTROLS in update
    assert reads == [1]
    await bob.disconnect()
