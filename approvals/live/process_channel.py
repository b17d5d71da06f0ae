"""One channel per Daphne process in the groups of the proposals its sockets have open.

channels-redis sends a process one Redis message for all its channels in a group, then copies it into
each channel's queue in the process. With a channel per socket, each socket's consumer then took its
copy and dispatched it, and Channels runs `close_old_connections` in its one sync thread before every
handler (channels.db.aclose_old_connections): a Daphne serving 25 sockets of a proposal made 25 thread
hand-offs, one after the other, for every change (read in the libraries' source, not profiled). That,
not Reviewer's own work, was most of a change's time to its sockets: in
bench/r2_fanout.py's transport floors, 50 bare forwarding sockets took 2.1x to 3.3x a bare group_send at
p95, and the same sockets behind one channel per process 1.05x to 1.6x. So a process's page sockets share
one channel, added to a proposal's group when its first socket there joins (again at every join, which
keeps the membership from expiring) and discarded when its last one leaves; one receiver task takes the
messages off the layer and hands each to the process's sockets of that proposal (live/fanout.py
`LiveUpdates`, which owns this). The receiver runs while the process has a page socket open.

If the layer fails (Redis gone), the receiver closes the process's page sockets with 1011, as Daphne
closed a socket whose own receive failed; the pages reconnect and read what they show again.

The channel is a plain one ("reviewer-pages.<random>"), not a process-specific "…!…" name from
layer.new_channel(). channels-redis receives every "!" channel of a layer through state kept on the
layer object (one receive lock, buffers, and one per-key lock for all of them), and an event loop that
ends while receives wait there can leave that state bound to the ended loop. Tests give each its own
loop and share the layer: with this receiver on a "!" channel the suite hung in a loop's teardown, the
receiver cancelled inside layer.receive(); a standalone run of loops in turn, four "!" receivers each,
cancelled at the loop's end, stopped delivering within 7 and 148 loops in two of three runs. A plain
channel is received with a blocking pop and a lock of its own: in that run the receiver on it got its
message in each of 1,500 loops.
"""

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

# The close code of a page socket whose process lost its channel layer: the pages reconnect (htmx retries
# on 1011) and read the page again, as after any reconnect.
LAYER_FAILED = 1011


class ProcessChannel:
    """This process's channel in the proposal groups, and the task that receives on it (one event loop's)."""

    def __init__(
        self, layer, deliver: Callable[[dict], Awaitable[None]], failed: Callable[[], Awaitable[None]]
    ):
        self.layer = layer
        self.loop = asyncio.get_running_loop()
        self.deliver = deliver  # awaited for each message, in order
        self.failed = failed  # awaited once if receiving fails, and the receiver ends
        self.channel: str | None = None
        self.task: asyncio.Task | None = None
        # Group membership changes, one at a time: a leave's discard and a join's add of the same group,
        # sent from two tasks, could otherwise reach Redis in the other order and leave sockets out.
        self.membership = asyncio.Lock()

    async def add(self, group: str) -> None:
        async with self.membership:
            if self.channel is None:
                self.channel = f"reviewer-pages.{uuid.uuid4().hex}"
                self.task = asyncio.ensure_future(self._receive(self.channel))
            await self.layer.group_add(group, self.channel)

    async def discard(self, group: str, still_wanted: Callable[[], bool]) -> None:
        """Leave the group unless a socket joined it again while this waited its turn."""
        async with self.membership:
            if self.channel is not None and not still_wanted():
                await self.layer.group_discard(group, self.channel)

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    async def _receive(self, channel: str) -> None:
        while True:
            try:
                message = await self.layer.receive(channel)
            except Exception:  # not a cancel (a BaseException): stop() ends the task that way
                log.exception("live pages: receiving on %s failed; closing the page sockets", channel)
                await self.failed()
                return
            try:
                await self.deliver(message)
            except Exception:  # one malformed message must not stop every page of the process
                log.exception("live pages: a message on %s could not be delivered", channel)
