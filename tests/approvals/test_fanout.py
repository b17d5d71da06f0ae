"""A proposal page's live update is rendered once per event and audience, not once per socket
(approvals/live/fanout.py): the work of one event does not grow with the sockets open on the
proposal, every socket still gets exactly what its person's own page would show, and a socket whose
person lost access is closed."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from channels.db import database_sync_to_async
from django.contrib.sessions.backends.db import SessionStore
from django.db import connection
from django.template.loader import render_to_string
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_otp import DEVICE_ID_SESSION_KEY

from accounts.devices import reset_devices
from accounts.stepup import step_up_for
from approvals.live import fanout
from approvals.models.notifications import StandIn
from approvals.services.delegations import set_delegation
from approvals.services.votes import cast_vote
from approvals.web.pages import detail_context
from tenants.models import TenantMembership
from tests import factories
from tests.approvals.test_consumers import TIMEOUT, connected, proposal_path, sign_in
from tests.factories import submit, totp_code

FROZEN = datetime(2026, 3, 2, 9, 30, 15, 123456, tzinfo=UTC)


def viewer_of(user, channel=None, sent_mode=None) -> fanout.Viewer:
    """A socket's view as the consumer hands it over: its scope's user and (loaded) session."""
    client = factories.verified_client(user)
    session = SessionStore(session_key=client.session.session_key)
    session.get(DEVICE_ID_SESSION_KEY)  # loaded at connect, as the consumer's is
    scope = {"user": user, "session": session}
    return fanout.Viewer(channel or f"socket-{uuid.uuid4().hex}", scope, "test-csrf", sent_mode)


def sent(updates: dict[str, fanout.Update | None], channel: str) -> fanout.Update:
    """The update a socket is sent (None: it is sent nothing)."""
    update = updates[channel]
    assert update is not None, f"{channel} is sent nothing"
    return update


def reviewers(tenant, count: int) -> list:
    return [factories.make_user(f"extra{n}", tenant=tenant, groups=["finance"]) for n in range(count)]


def test_one_event_costs_the_same_queries_for_two_sockets_or_ten(tenant, agent, refund_policy, requester):
    proposal = submit(agent)
    people = reviewers(tenant, 10)
    few = [viewer_of(user) for user in people[:2]]
    many = [viewer_of(user) for user in people]

    with CaptureQueriesContext(connection) as for_few:
        fanout.render_updates(proposal.id, few)
    with CaptureQueriesContext(connection) as for_many:
        updates = fanout.render_updates(proposal.id, many)

    assert len(for_many) == len(for_few), [q["sql"] for q in for_many]
    assert all(update is not None for update in updates.values())
    # The shared partials and the partials of one audience (ten reviewers who can each decide) are
    # rendered once: every socket's update holds the very same strings.
    first = sent(updates, many[0].channel)
    assert all(sent(updates, v.channel).parts[0] is first.parts[0] for v in many)
    assert all(sent(updates, v.channel).parts[1] is first.parts[1] for v in many)
    assert '<section id="live"' in first.parts[0] and 'id="you"' in first.parts[1]


def expected_update(proposal, user, viewer) -> str:
    """What the proposal page's own builder (detail_context) renders for this person, partial by partial."""
    context = detail_context(proposal, user, viewer.scope["session"])
    context.update(oob=True, csrf_token=viewer.csrf_token)
    names = (*fanout.SHARED_PARTIALS, *fanout.AUDIENCE_PARTIALS, "decision")
    return "".join(render_to_string(f"approvals/detail.html#{name}", context) for name in names)


@time_machine.travel(FROZEN, tick=False)
def test_every_person_gets_what_their_own_page_shows(
    tenant, agent, refund_policy, requester, reviewer_a, reviewer_b, reviewer_c, admin_user, compliance
):
    """Eligible, principal, other group, compliance, admin, a voter: the update equals the page's partials,
    while the proposal waits and after it is approved (revocable for its approver and the admin)."""
    proposal = submit(agent)
    people = [requester, reviewer_a, reviewer_b, reviewer_c, admin_user, compliance]
    viewers = {user.pk: viewer_of(user) for user in people}

    def check():
        proposal.refresh_from_db()
        updates = fanout.render_updates(proposal.id, list(viewers.values()))
        for user in people:
            viewer = viewers[user.pk]
            assert sent(updates, viewer.channel).html == expected_update(proposal, user, viewer), user

    check()
    cast_vote(
        proposal.id,
        reviewer_a,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
    )
    check()


@time_machine.travel(FROZEN, tick=False)
def test_a_delegate_and_a_stand_in_get_what_their_own_page_shows(
    tenant, agent, refund_policy, requester, reviewer_a, reviewer_b, reviewer_c, admin_user
):
    """reviewer_c (ops) decides a finance proposal through reviewer_b's delegation, and the admin because
    the escalation step added her: the live update shows each of them the controls their page shows."""
    proposal = submit(agent)
    now = timezone.now()
    set_delegation(
        actor=reviewer_b, tenant=tenant, delegate=reviewer_c, starts_at=now, ends_at=now + timedelta(hours=8)
    )
    StandIn.objects.create(proposal=proposal, user=admin_user, added_at=now)
    viewers = {user.pk: viewer_of(user) for user in (reviewer_c, admin_user)}

    updates = fanout.render_updates(proposal.id, list(viewers.values()))

    for user in (reviewer_c, admin_user):
        viewer = viewers[user.pk]
        assert sent(updates, viewer.channel).html == expected_update(proposal, user, viewer), user
        assert "not a member of a group" not in sent(updates, viewer.channel).html


def test_a_socket_whose_person_left_the_tenant_gets_nothing(
    tenant, agent, refund_policy, reviewer_a, reviewer_b
):
    proposal = submit(agent)
    staying, leaving = viewer_of(reviewer_a), viewer_of(reviewer_b)
    TenantMembership.objects.filter(user=reviewer_b).delete()
    updates = fanout.render_updates(proposal.id, [staying, leaving])
    assert updates[leaving.channel] is None
    assert updates[staying.channel] is not None


def test_a_panel_is_sent_again_only_when_its_controls_change(tenant, agent, refund_policy, reviewer_a):
    proposal = submit(agent)
    fresh = viewer_of(reviewer_a)
    first = sent(fanout.render_updates(proposal.id, [fresh]), fresh.channel)
    assert '<section id="decision"' in first.html and first.mode == ("vote", "awaiting_review")
    again = viewer_of(reviewer_a, sent_mode=first.mode)
    assert (
        '<section id="decision"' not in sent(fanout.render_updates(proposal.id, [again]), again.channel).html
    )


# ---------------------------------------------------------------------------------------------------
# Through the real sockets: one update for every socket of the process


@pytest.mark.django_db(transaction=True)
async def test_one_vote_renders_one_update_for_all_open_pages(
    monkeypatch, agent, refund_policy, requester, reviewer_a, reviewer_b, reviewer_c, admin_user, compliance
):
    calls = []
    render_updates = fanout.render_updates

    def counted(proposal_id, viewers):
        calls.append(len(viewers))
        return render_updates(proposal_id, viewers)

    monkeypatch.setattr(fanout, "render_updates", counted)
    proposal = await database_sync_to_async(submit)(agent)
    people = [reviewer_b, reviewer_c, admin_user, compliance]
    sockets = [
        await connected(proposal_path(proposal), await database_sync_to_async(sign_in)(user))
        for user in people
    ]
    assert calls == [1] * len(people)  # on connect, each its own state
    calls.clear()

    step_up = await database_sync_to_async(step_up_for)(
        reviewer_a, await database_sync_to_async(totp_code)(reviewer_a)
    )
    await database_sync_to_async(cast_vote)(
        proposal.id, reviewer_a, verdict="approve", digest_seen=proposal.action_digest, step_up=step_up
    )
    updates = [await s.receive_from(timeout=TIMEOUT) for s in sockets]

    assert calls == [len(people)]  # one update, for every socket open on the proposal in this process
    assert all("Alice approved" in update for update in updates)
    # each person's own panel: Bob can no longer vote on an approved proposal, the admin may revoke it
    assert "Revoke the decision" in updates[2] and "Revoke the decision" not in updates[0]
    for s in sockets:
        await s.disconnect()


def test_a_socket_whose_session_ended_or_device_was_reset_gets_nothing(
    tenant, agent, refund_policy, reviewer_a
):
    proposal = submit(agent)
    people = reviewers(tenant, 3)
    staying, signed_out, reset = (viewer_of(user) for user in people)
    signed_out.scope["session"].delete()
    reset_devices(people[2], actor=factories.make_user("helpdesk", tenant=tenant, role="admin"))
    updates = fanout.render_updates(proposal.id, [staying, signed_out, reset])
    assert updates[signed_out.channel] is None and updates[reset.channel] is None
    assert updates[staying.channel] is not None


@pytest.mark.django_db(transaction=True)
async def test_in_one_update_a_signed_out_socket_is_closed_and_the_others_are_served(
    agent, refund_policy, requester, reviewer_a, reviewer_b, reviewer_c
):
    proposal = await database_sync_to_async(submit)(agent)
    leaving_session = await database_sync_to_async(sign_in)(reviewer_b)
    leaving = await connected(proposal_path(proposal), leaving_session)
    staying = await connected(proposal_path(proposal), await database_sync_to_async(sign_in)(reviewer_c))
    await database_sync_to_async(SessionStore(session_key=leaving_session).delete)()
    step_up = await database_sync_to_async(step_up_for)(
        reviewer_a, await database_sync_to_async(totp_code)(reviewer_a)
    )
    await database_sync_to_async(cast_vote)(
        proposal.id, reviewer_a, verdict="approve", digest_seen=proposal.action_digest, step_up=step_up
    )
    assert (await leaving.receive_output(timeout=TIMEOUT))["type"] == "websocket.close"
    assert "Alice approved" in await staying.receive_from(timeout=TIMEOUT)
    for s in (leaving, staying):
        await s.disconnect()
