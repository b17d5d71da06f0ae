"""A Daphne process's proposal pages share one channel in each proposal's group
(approvals/live/process_channel.py): a change's message is taken off the channel layer once per
process and handed to every page socket of the process open on that proposal, not once per socket."""

import asyncio
import threading
import time

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from approvals import events
from approvals.live import consumers, fanout
from approvals.live.process_channel import LAYER_FAILED
from tests import factories
from tests.approvals.test_consumers import TIMEOUT, _own_channel_prefix  # noqa: F401 (autouse)
from tests.approvals.test_live_facts import one_clock, open_page, rendered, two_approvals  # noqa: F401 (fixtures)
from tests.factories import submit

# Refunds need two finance approvals: a change leaves every page's vote controls as they were.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("two_approvals")]


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    """This test's pages only: a test before it may have left a socket its server closed registered (the
    test client sends no disconnect for it, where Daphne always does)."""
    live_updates = fanout.LiveUpdates()
    monkeypatch.setattr(fanout, "live_updates", live_updates)
    monkeypatch.setattr(consumers, "live_updates", live_updates)


@pytest.fixture
def deliveries(monkeypatch) -> list:
    """The messages this process took off its channel: one entry per message, however many sockets."""
    taken: list = []
    deliver = fanout.LiveUpdates._deliver

    async def counted(self, message):
        taken.append(message["event"])
        await deliver(self, message)

    monkeypatch.setattr(fanout.LiveUpdates, "_deliver", counted)
    return taken


async def test_three_pages_of_one_process_take_a_change_off_the_layer_once(
    deliveries, tenant, agent, reviewer_a, reviewer_b
):
    proposal = await database_sync_to_async(submit)(agent)
    dora = await database_sync_to_async(factories.make_user)("dora", tenant=tenant, groups=["finance"])
    pages = [(await open_page(proposal, user))[1] for user in (reviewer_a, reviewer_b, dora)]
    message = await rendered(proposal, shared="<p>THE CHANGE</p>")
    layer = get_channel_layer()
    assert layer is not None
    await layer.group_send(events.proposal_group(proposal.id), message)
    for page in pages:
        assert "THE CHANGE" in await page.receive_from(timeout=TIMEOUT)
    assert deliveries == [message["event"]]
    for page in pages:
        await page.disconnect()


async def test_the_process_leaves_the_group_with_its_last_page_and_joins_again_with_the_next(
    deliveries, agent, reviewer_a, reviewer_b
):
    proposal = await database_sync_to_async(submit)(agent)
    group = events.proposal_group(proposal.id)
    _, first = await open_page(proposal, reviewer_a)
    _, second = await open_page(proposal, reviewer_b)
    await first.disconnect()
    layer = get_channel_layer()
    assert layer is not None
    await layer.group_send(group, await rendered(proposal))
    assert await second.receive_from(timeout=TIMEOUT)  # one page left: the process stays in the group
    await second.disconnect()
    assert fanout.live_updates.channel is None  # no page open: no receiver
    assert proposal.id not in fanout.live_updates.open

    _, third = await open_page(proposal, reviewer_a)
    deliveries.clear()
    message = await rendered(proposal)
    await layer.group_send(group, message)
    assert await third.receive_from(timeout=TIMEOUT)
    assert deliveries == [message["event"]]
    await third.disconnect()


async def test_when_the_layer_fails_the_pages_close_to_reconnect_and_the_next_page_is_served(
    monkeypatch, agent, reviewer_a, reviewer_b
):
    """A receive that raises stands for Redis gone (which the in-memory layer of the tests cannot lose):
    the pages close with 1011, which htmx reconnects on, and read the page again when they do."""
    proposal = await database_sync_to_async(submit)(agent)
    _, page = await open_page(proposal, reviewer_a)
    layer, channel = get_channel_layer(), fanout.live_updates.channel
    assert layer is not None and channel is not None  # the open page's receiver
    receive = layer.receive

    async def failing(name):
        if name == channel.channel:
            raise ConnectionError("the channel layer is gone")
        return await receive(name)

    # The receiver waits in the layer's own receive now: the message below ends that wait, and its next
    # receive is the failing one.
    monkeypatch.setattr(layer, "receive", failing)
    await layer.group_send(events.proposal_group(proposal.id), await rendered(proposal))
    assert await page.receive_from(timeout=TIMEOUT)
    closed = await page.receive_output(timeout=TIMEOUT)
    assert closed == {"type": "websocket.close", "code": LAYER_FAILED}
    assert fanout.live_updates.channel is not channel

    monkeypatch.setattr(layer, "receive", receive)
    _, again = await open_page(proposal, reviewer_b)
    await layer.group_send(events.proposal_group(proposal.id), await rendered(proposal))
    assert await again.receive_from(timeout=TIMEOUT)
    await again.disconnect()


async def test_a_change_that_comes_while_the_page_rereads_for_its_person_waits_for_that_read(
    monkeypatch, agent, reviewer_b
):
    """The person's invalidation comes on the socket's own channel, the change on the process's: the
    socket takes them in turn. Taken together, the change would find the socket's facts unknown in the
    middle of the re-read and read again instead of showing the change's parts."""
    proposal = await database_sync_to_async(submit)(agent)
    _, page = await open_page(proposal, reviewer_b)
    change = await rendered(proposal, shared="<p>THE CHANGE</p>", read_at=time.time() + 60)
    reading, release = threading.Event(), threading.Event()
    render_updates = fanout.render_updates

    def held(proposal_id, viewers):
        reading.set()
        release.wait(TIMEOUT)
        return render_updates(proposal_id, viewers)

    handed_over = asyncio.Event()
    proposal_changed = consumers.ProposalConsumer.proposal_changed

    async def taking(self, event):
        handed_over.set()
        await proposal_changed(self, event)

    monkeypatch.setattr(fanout, "render_updates", held)
    monkeypatch.setattr(consumers.ProposalConsumer, "proposal_changed", taking)
    layer = get_channel_layer()
    assert layer is not None
    await layer.group_send(events.person_group(reviewer_b.pk), {"type": "facts.changed"})
    assert await asyncio.to_thread(reading.wait, TIMEOUT)  # the page re-reads its person's facts now
    await layer.group_send(events.proposal_group(proposal.id), change)
    await asyncio.wait_for(handed_over.wait(), TIMEOUT)  # the change reached the socket meanwhile
    release.set()
    assert "THE CHANGE" not in await page.receive_from(timeout=TIMEOUT)  # the re-read
    assert "THE CHANGE" in await page.receive_from(timeout=TIMEOUT)  # then the change, from its message
    await page.disconnect()
