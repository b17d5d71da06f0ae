"""R2: one change fanned out to 50 open reviewer sockets on two Daphne processes over Redis, against a
bare channels-redis group_send to 50 consumers (target: p95 ≤ 1.5x, 0 lost of 1,000).

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_delivery REDIS_URL=redis://127.0.0.1:6379/0 \\
        .venv/bin/python bench/r2_fanout.py [EVENTS] [SOCKETS]

Measured: 50 reviewers (each signed in with a one-time code) have one proposal's page socket open, half
on each Daphne; this process publishes the change exactly as a committed vote does (events.py's
group_send to the proposal's group), and the time is taken when each socket has received its page
update (the re-read and re-rendered partials). Baseline, same Redis, same run, in turns with the
fan-out (one event, then one bare send): 50 bare channels joined to a group, one group_send, the time
until each bare receive() returns. EVENTS × SOCKETS deliveries in all (20 × 50 = 1,000); a socket that
gets nothing within 10 s counts as lost. The message is events.changed_message (with its event id), so
the sockets of one Daphne share one update of the page per event (approvals/live/fanout.py).
"""

import asyncio
import json
import os
import secrets
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import REDIS_URL as BENCH_REDIS_URL  # noqa: E402 (after the path)
from bench.delivery_stack import row, scratch_folder, setup_django  # noqa: E402

TARGET = "p95 ≤ 1.5x, 0 lost of 1,000"
LOST_AFTER_SECONDS = 10


def main(events: int = 20, sockets: int = 50) -> list[dict]:
    # The shared channel layer: REDIS_URL, else the benchmarks' Redis (BENCH_REDIS_URL, bench/common.py),
    # so `make bench` runs R2 with no setting beyond the README's.
    os.environ.setdefault("REDIS_URL", BENCH_REDIS_URL)
    os.environ["CHANNELS_PREFIX"] = f"bench-r2-{secrets.token_hex(4)}"  # the Daphnes' and ours
    folder = scratch_folder()
    setup_django(folder)
    from tests import factories
    from tests.e2e.conftest import ServerProcess, Stack
    from tests.e2e.test_fanout_redis import _answers

    stacks, processes = [], []
    try:
        for name in ("a", "b"):
            (folder / name).mkdir()
            stack = Stack(folder / name)
            stacks.append(stack)
            fd = stack.listener.fileno()
            process = ServerProcess(
                "reviewer",
                [sys.executable, "-m", "daphne", "--fd", str(fd), "reviewer.asgi:application"],
                env=stack.env(),
                log_dir=stack.log_dir,
                pass_fds=(fd,),
            ).start()
            processes.append(process)
            process.wait_until(lambda url=stack.url: _answers(f"{url}/.well-known/jwks.json"), "JWKS answers")
        tenant = factories.make_tenant()
        factories.make_policy(
            tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 2}]
        )
        agent = factories.make_agent(tenant)
        proposal = factories.submit(agent)
        cookies = []
        for n in range(sockets):
            user = factories.make_user(f"reviewer{n}", tenant=tenant, groups=["finance"])
            cookies.append((stacks[n % 2].url, _session_cookie(stacks[n % 2].url, user)))
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # nothing below touches the ORM concurrently
        measured, lost, baseline = asyncio.run(_fan_out(proposal, cookies, events))
    finally:
        for process in processes:
            process.stop()
        for stack in stacks:
            stack.listener.close()
    result = row(
        "R2",
        f"a change fanned out to {sockets} reviewer sockets on 2 Daphnes (Redis) vs bare group_send "
        f"to {sockets} consumers",
        baseline,
        measured,
        TARGET,
    )
    result["lost"] = f"{lost} of {events * sockets}"
    result["met"] = result["met"] and lost == 0
    result["note"] = f"{result['note']}, lost {result['lost']}"
    return [result]


def _session_cookie(url: str, user) -> str:
    from tests.e2e.test_fanout_redis import signed_in

    client = signed_in(url, user)
    try:
        return "; ".join(f"{name}={value}" for name, value in client.cookies.items())
    finally:
        client.close()


async def _fan_out(proposal, cookies, events: int) -> tuple[list[float], int, list[float]]:
    """The fan-out's times and losses, and the bare group_send's times, measured in turns (one event to
    the reviewer sockets, then one bare group_send), so other load on the machine falls on both."""
    import websockets
    from channels.layers import get_channel_layer

    from approvals import events as fan_out

    layer = get_channel_layer()
    group = fan_out.proposal_group(proposal.id)
    connections = []
    for url, cookie in cookies:
        socket = await websockets.connect(
            url.replace("http://", "ws://") + f"/ws/proposals/{proposal.id}/",
            additional_headers={"Cookie": cookie},
            origin=url,
            max_size=None,
        )
        await asyncio.wait_for(socket.recv(), LOST_AFTER_SECONDS)  # the state on connect
        connections.append(socket)
    bare = await _BareGroup.joined(layer, len(cookies))
    times, lost, baseline = [], 0, []
    try:
        for _ in range(events):
            start = time.perf_counter()
            await layer.group_send(group, fan_out.changed_message(proposal.id))
            arrivals = await asyncio.gather(*(_arrival(s) for s in connections))
            times += [at - start for at in arrivals if at is not None]
            lost += sum(at is None for at in arrivals)
            baseline += await bare.send_and_receive()
    finally:
        for socket in connections:
            await socket.close()
        await bare.leave()
    return times, lost, baseline


async def _arrival(socket) -> float | None:
    try:
        await asyncio.wait_for(socket.recv(), LOST_AFTER_SECONDS)
    except TimeoutError:
        return None
    return time.perf_counter()


class _BareGroup:
    """The baseline: bare channels joined to a group, one group_send, the time until each receive()."""

    def __init__(self, layer, group: str, channels: list[str]):
        self.layer, self.group, self.channels = layer, group, channels

    @classmethod
    async def joined(cls, layer, consumers: int) -> "_BareGroup":
        group = f"bare-{secrets.token_hex(4)}"
        channels = [await layer.new_channel() for _ in range(consumers)]
        for channel in channels:
            await layer.group_add(group, channel)
        return cls(layer, group, channels)

    async def send_and_receive(self) -> list[float]:
        async def received(channel) -> float:
            await self.layer.receive(channel)
            return time.perf_counter()

        start = time.perf_counter()
        await self.layer.group_send(self.group, {"type": "bare.message"})
        return [at - start for at in await asyncio.gather(*(received(c) for c in self.channels))]

    async def leave(self) -> None:
        for channel in self.channels:
            await self.layer.group_discard(self.group, channel)


if __name__ == "__main__":
    print(json.dumps(main(*(int(a) for a in sys.argv[1:3])), indent=2))
