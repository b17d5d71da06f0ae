"""R2: one change fanned out to 50 open reviewer sockets on two Daphne processes over Redis, against a
bare channels-redis group_send to 50 consumers (target: p95 ≤ 1.5x, 0 lost of 1,000).

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_delivery REDIS_URL=redis://127.0.0.1:6379/0 \\
        .venv/bin/python bench/r2_fanout.py [EVENTS] [SOCKETS]

Measured: 50 reviewers (each signed in with a one-time code) have one proposal's page socket open, half
on each Daphne; this process publishes the change exactly as a committed vote does: it renders the
page's parts once (approvals/live/broadcast.py: the clock starts before that read) and group_sends the
message to the proposal's group; the time is taken when each socket has received its page update.
Baseline, same Redis, same run, in turns with the fan-out (one event, then one bare send): 50 bare
channels joined to a group, one group_send, the time until each bare receive() returns. EVENTS × SOCKETS
deliveries in all (20 × 50 = 1,000); a socket that gets nothing within 10 s counts as lost.

Also in the same turns, "hint": the bare events.changed_message (no parts), which every Daphne answers
by reading the page for its sockets (approvals/live/fanout.py), as every event did before the message
carried the parts. Reported beside the row: queries and CPU per event of the committing render (this
process, in-process), and the two Daphnes' CPU per event (from /proc) for the rendered and hint phases.
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
from bench.delivery_stack import row, scratch_folder, setup_django, summary  # noqa: E402

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
    from tests.e2e.conftest import Stack
    from tests.reviewer_processes import ServerProcess, answers

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
            process.wait_until(lambda url=stack.url: answers(f"{url}/.well-known/jwks.json"), "JWKS answers")
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
        pids = [process.process.pid for process in processes]
        measured, lost, baseline, extra = asyncio.run(_fan_out(proposal, cookies, events, pids))
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
    hint = summary(extra.pop("hint_times"))
    bare = summary(baseline)
    result["hint"] = {
        **hint,
        "p95_ratio": round(hint["p95_ms"] / bare["p95_ms"], 2),
        "lost": extra.pop("hint_lost"),
    }
    result["profile"] = extra
    result["note"] = (
        f"{result['note']}, lost {result['lost']}; hint-only message (every Daphne reads): "
        f"p95 {hint['p95_ms']} ms "
        f"({result['hint']['p95_ratio']}x), lost {result['hint']['lost']}; committing render "
        f"{extra['render_queries_per_event']} queries, {extra['render_cpu_ms_per_event']} ms CPU per event, "
        f"message {extra['message_bytes']} bytes, render wall p50 {extra['render_ms']['p50_ms']} / p95 "
        f"{extra['render_ms']['p95_ms']} ms, from its group_send p95 "
        f"{extra['from_group_send_ms']['p95_ms']} ms; "
        f"Daphnes' CPU per event {extra['daphne_cpu_ms_per_event']} ms rendered / "
        f"{extra['daphne_cpu_ms_per_event_hint']} ms hint; load average {extra['load_average']}"
    )
    return [result]


def _session_cookie(url: str, user) -> str:
    from tests.e2e.test_fanout_redis import signed_in

    client = signed_in(url, user)
    try:
        return "; ".join(f"{name}={value}" for name, value in client.cookies.items())
    finally:
        client.close()


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of these processes so far (/proc/<pid>/stat)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
    return total / os.sysconf("SC_CLK_TCK")


async def _fan_out(proposal, cookies, events: int, pids: list[int]):
    """The fan-out's times and losses, and the bare group_send's times, measured in turns (one rendered
    event to the reviewer sockets, one hint, one bare group_send), so other load on the machine falls on
    all three."""
    import websockets
    from channels.layers import get_channel_layer
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from approvals import events as fan_out
    from approvals.live.broadcast import rendered_message

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
    times, lost, baseline, hint_times, hint_lost = [], 0, [], [], 0
    render_cpu = daphne_cpu = daphne_cpu_hint = 0.0
    queries = size = 0
    renders: list[float] = []
    after_send: list[float] = []
    load = [os.getloadavg()[0]]
    try:
        for _ in range(events):
            start, cpu_start, daphnes_start = time.perf_counter(), time.process_time(), _cpu_seconds(pids)
            with CaptureQueriesContext(connection) as read:
                message = rendered_message(proposal.id)
            render_cpu += time.process_time() - cpu_start
            queries += len(read)
            size = len(json.dumps(message))
            sent = time.perf_counter()
            renders.append(sent - start)
            await layer.group_send(group, message)
            arrivals = await asyncio.gather(*(_arrival(s) for s in connections))
            after_send += [at - sent for at in arrivals if at is not None]
            daphne_cpu += _cpu_seconds(pids) - daphnes_start
            times += [at - start for at in arrivals if at is not None]
            lost += sum(at is None for at in arrivals)

            start, daphnes_start = time.perf_counter(), _cpu_seconds(pids)
            await layer.group_send(group, fan_out.changed_message(proposal.id))
            arrivals = await asyncio.gather(*(_arrival(s) for s in connections))
            daphne_cpu_hint += _cpu_seconds(pids) - daphnes_start
            hint_times += [at - start for at in arrivals if at is not None]
            hint_lost += sum(at is None for at in arrivals)

            baseline += await bare.send_and_receive()
            load.append(os.getloadavg()[0])
    finally:
        for socket in connections:
            await socket.close()
        await bare.leave()
    extra = {
        "hint_times": hint_times,
        "hint_lost": hint_lost,
        "render_queries_per_event": round(queries / events, 1),
        "message_bytes": size,
        "render_ms": summary(renders),
        "from_group_send_ms": summary(after_send),
        "render_cpu_ms_per_event": round(1000 * render_cpu / events, 1),
        "daphne_cpu_ms_per_event": round(1000 * daphne_cpu / events, 1),
        "daphne_cpu_ms_per_event_hint": round(1000 * daphne_cpu_hint / events, 1),
        "load_average": f"{min(load):.1f}–{max(load):.1f}",
    }
    return times, lost, baseline, extra


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
