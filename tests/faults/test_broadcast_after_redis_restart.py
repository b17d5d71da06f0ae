"""The after-commit thread keeps one event loop, and with it one Redis connection, for the broadcasts
of every change (lib/commit_hooks.py run_async). That connection outlives a Redis restart, and the
first command on it then fails: the first change after the restart must still reach the sockets
(approvals/events.py sends it again on a new connection), not be lost to the dead connection. A real
redis-server of the module's own (tests/faults/servers.py), killed and started again on its port."""

import asyncio
import shutil

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.db import transaction

from approvals import events
from lib import group_listeners as listeners
from lib.commit_hooks import wait_for_background_hooks
from tests.factories import submit

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not shutil.which("redis-server"), reason="needs redis-server (apt-get install redis)"),
]


@pytest.fixture(autouse=True)
def hooks_in_background(layer_on_private_redis, settings):
    settings.COMMIT_HOOKS_IN_BACKGROUND = True  # as deployed: the broadcasts run on the after-commit thread
    yield
    wait_for_background_hooks()  # before the Redis server stops


def heard(proposal) -> dict:
    """A change of the proposal, committed, as a socket on its tenant's queue hears it."""
    layer = get_channel_layer()
    assert layer is not None

    async def listen_then_hear():
        channel, group = await layer.new_channel(), events.tenant_group(proposal.tenant_id)
        await sync_to_async(listeners.join)(
            channel, [group]
        )  # as a queue socket does (lib/group_listeners.py)
        await layer.group_add(group, channel)
        try:
            await asyncio.get_running_loop().run_in_executor(None, change_and_broadcast)
            return await asyncio.wait_for(layer.receive(channel), timeout=5)
        finally:
            await sync_to_async(listeners.leave)(channel, [group])

    def change_and_broadcast():
        with transaction.atomic():
            events.proposal_changed(proposal)
        wait_for_background_hooks()

    return async_to_sync(listen_then_hear)()


def test_the_first_change_after_redis_restarted_still_reaches_the_sockets(
    layer_on_private_redis, agent, refund_policy
):
    proposal = submit(agent)
    assert heard(proposal)["proposal_id"] == str(proposal.id)  # the thread's connection is open now
    layer_on_private_redis.restart()  # killed and back, empty: the groups are gone, the connection is dead
    assert heard(proposal)["proposal_id"] == str(proposal.id)
