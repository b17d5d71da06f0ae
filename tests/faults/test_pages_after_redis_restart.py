"""When Redis dies and comes back empty (every group gone), a Daphne process's proposal pages close with
1011, which htmx reconnects on, and the reconnected pages join their groups again and get the next
change (approvals/live/process_channel.py). A real redis-server of the module's own
(tests/faults/servers.py), killed and started again on its port."""

import asyncio
import shutil
import time

import pytest
import redis.exceptions
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from approvals import events
from approvals.live.process_channel import LAYER_FAILED
from tests.approvals.test_consumers import TIMEOUT, connected, proposal_path, sign_in
from tests.approvals.test_live_facts import rendered
from tests.approvals.test_process_channel import fresh_process  # noqa: F401 (autouse)
from tests.factories import submit

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not shutil.which("redis-server"), reason="needs redis-server (apt-get install redis)"),
]


async def ended(page) -> dict:
    """How the page ended. Either way with 1011: its process's receiver closes it, or the socket's own
    channel (its person's and session's groups) fails first and ends its application, which Daphne
    closes with 1011 (the test client raises the application's error instead)."""
    try:
        output = await page.receive_output(timeout=TIMEOUT)
        await page.disconnect()
    except redis.exceptions.ConnectionError:
        return {"type": "websocket.close", "code": LAYER_FAILED}
    return output


async def test_pages_close_when_redis_restarts_and_get_changes_again_once_reconnected(
    layer_on_private_redis, agent, refund_policy, reviewer_a
):
    proposal = await database_sync_to_async(submit)(agent)
    session = await database_sync_to_async(sign_in)(reviewer_a)
    page = await connected(proposal_path(proposal), session)
    await asyncio.to_thread(layer_on_private_redis.restart)
    assert await ended(page) == {"type": "websocket.close", "code": LAYER_FAILED}

    again = await connected(proposal_path(proposal), session)  # as htmx reconnects
    change = await rendered(proposal, shared="<p>THE CHANGE</p>", read_at=time.time() + 60)
    layer = get_channel_layer()
    assert layer is not None
    await layer.group_send(events.proposal_group(proposal.id), change)
    assert "THE CHANGE" in await again.receive_from(timeout=TIMEOUT)
    await again.disconnect()
