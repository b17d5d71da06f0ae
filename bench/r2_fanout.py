"""R2: one change fanned out to 50 open reviewer sockets on two Daphne processes over Redis, against a
bare channels-redis group_send to 50 consumers (target: p95 ≤ 1.5x, 0 lost of 1,000).

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_delivery REDIS_URL=redis://127.0.0.1:6379/0 \\
        .venv/bin/python bench/r2_fanout.py [EVENTS] [SOCKETS]

Measured: 50 reviewers (each signed in with a one-time code) have one proposal's page socket open, half
on each Daphne; at each event another of them approves through the page's form, a POST to the Daphne
their socket is on (session cookie, CSRF token, a fresh one-time code; the policy's quorum is more than
the events, so every vote is a change and none decides). The clock starts as the request is sent, so
the time includes the vote's request and view, its render of the page's parts inside its transaction
(approvals/live/broadcast.py), the commit and the send, in a real Daphne; it is taken when each socket
has received its page update. R2 started its clock at the commit of a message this process rendered
before; that way is still measured in the same turns ("in_process" in the row) beside the old
after-commit path.
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
from bench.common import part_ratios, spread  # noqa: E402
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
                # each socket's stage timestamps (approvals/live/trace.py), read back after the run
                env={**stack.env(), "REVIEWER_LIVE_TRACE": str(folder / name / "live-trace.log")},
                log_dir=stack.log_dir,
                pass_fds=(fd,),
            ).start()
            processes.append(process)
            process.wait_until(lambda url=stack.url: answers(f"{url}/.well-known/jwks.json"), "JWKS answers")
        floor_urls = []
        for name in ("floor-a", "floor-b"):  # the transport floor's bare Daphnes (bench/fanout_floor.py)
            (folder / name).mkdir()
            stack = Stack(folder / name)
            stacks.append(stack)
            fd = stack.listener.fileno()
            processes.append(
                ServerProcess(
                    "floor",
                    [sys.executable, "-m", "daphne", "--fd", str(fd), "bench.fanout_floor:application"],
                    env=stack.env(),
                    log_dir=stack.log_dir,
                    pass_fds=(fd,),
                ).start()
            )
            floor_urls.append(stack.url)
        tenant = factories.make_tenant()
        # Every event's vote is short of the quorum (one voter each, EVENTS < the count): the proposal
        # stays open, and each vote is a change its page's sockets get.
        if events >= sockets:
            raise SystemExit("R2 needs fewer events than sockets: each event is another reviewer's vote")
        factories.make_policy(
            tenant,
            "refunds",
            tool_pattern="payments.refund",
            thresholds=[{"group": "finance", "count": events + 1}],
        )
        agent = factories.make_agent(tenant)
        proposal = factories.submit(agent)
        cookies, users = [], []
        for n in range(sockets):
            user = factories.make_user(f"reviewer{n}", tenant=tenant, groups=["finance"])
            users.append(user)
            cookies.append((stacks[n % 2].url, _session_cookie(stacks[n % 2].url, user)))
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # nothing below touches the ORM concurrently
        pids = [process.process.pid for process in processes[:2]]  # Reviewer's Daphnes
        floor_sockets = [floor_urls[n % 2] for n in range(sockets)]
        measured, lost, baseline, extra = asyncio.run(
            _fan_out(proposal, cookies, users, events, pids, floor_sockets)
        )
        traces = [folder / n / "live-trace.log" for n in ("a", "b")]
        extra["in_process"]["stages_ms"] = _stages(extra["in_process"].pop("marks"), traces)
        extra["after_commit"]["stages_ms"] = _stages(extra["after_commit"].pop("marks"), traces)
    finally:
        for process in processes:
            process.stop()
        for stack in stacks:
            stack.listener.close()
    result = row(
        "R2",
        f"a reviewer's vote POSTed to a Daphne → the page update on {sockets} reviewer sockets on 2 Daphnes "
        f"(Redis) vs bare group_send to {sockets} consumers",
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
    inside = extra["in_process"]
    inside_times = summary(inside.pop("times"))
    result["in_process"] = {
        **inside_times,
        "p95_ratio": round(inside_times["p95_ms"] / bare["p95_ms"], 2),
        "lost": inside.pop("lost"),
    }
    after = extra["after_commit"]
    after_times = summary(after.pop("times"))
    for name in ("floor", "floor_process"):
        floor = summary(extra.pop(f"{name}_times"))
        result[name] = {
            **floor,
            "p95_ratio": round(floor["p95_ms"] / bare["p95_ms"], 2),
            "lost": extra.pop(f"{name}_lost"),
        }
    result["after_commit"] = {
        **after_times,
        "p95_ratio": round(after_times["p95_ms"] / bare["p95_ms"], 2),
        "lost": after.pop("lost"),
    }
    result["profile"] = extra
    quarters = part_ratios(baseline, measured, 0.95)
    result["note"] = (
        f"p50 {result['ratios']['p50']}x, p95 {result['ratios']['p95']}x; p95 ratio's "
        f"{spread(quarters, label='quarters of the events')}; lost {result['lost']}; the vote's own answer "
        f"p50 {extra['vote_answer_ms']['p50_ms']} / p95 {extra['vote_answer_ms']['p95_ms']} ms, the Daphnes' "
        f"CPU per vote {extra['vote_daphne_cpu_ms_per_event']} ms, {extra['vote_extra_frames']} frames "
        f"beyond one per socket; "
        f"the same message published from this process (rendered before the commit, the clock at the "
        f"commit, R2's meaning before the vote went through a Daphne): p95 {inside_times['p95_ms']} ms "
        f"({result['in_process']['p95_ratio']}x), lost {result['in_process']['lost']}, render "
        f"{inside['render_ms']['p50_ms']} / {inside['render_ms']['p95_ms']} ms inside the transaction; "
        f"rendered after commit: p95 {after_times['p95_ms']} ms "
        f"({result['after_commit']['p95_ratio']}x), lost {result['after_commit']['lost']}; "
        f"transport floor (the same message through 2 bare Daphnes' forwarding sockets, "
        f"bench/fanout_floor.py): p95 {result['floor']['p95_ms']} ms ({result['floor']['p95_ratio']}x), "
        f"lost {result['floor']['lost']}; the same with one message per Daphne process: p95 "
        f"{result['floor_process']['p95_ms']} ms ({result['floor_process']['p95_ratio']}x), "
        f"lost {result['floor_process']['lost']}; "
        f"hint-only message (every Daphne reads): "
        f"p95 {hint['p95_ms']} ms "
        f"({result['hint']['p95_ratio']}x), lost {result['hint']['lost']}; committing render "
        f"{inside['render_queries_per_event']} queries, {inside['render_cpu_ms_per_event']} ms CPU per "
        "event, "
        f"message {inside['message_bytes']} bytes, after-commit render wall p50 "
        f"{after['render_ms']['p50_ms']} "
        f"/ p95 {after['render_ms']['p95_ms']} ms, from its group_send p95 "
        f"{after['from_group_send_ms']['p95_ms']} ms; "
        f"Daphnes' CPU per event {inside['daphne_cpu_ms_per_event']} ms rendered / "
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


async def _fan_out(proposal, cookies, users, events: int, pids: list[int], floor_urls: list[str]):
    """The fan-out's times and losses, and the bare group_send's times, measured in turns (one reviewer's
    vote POSTed to a Daphne, one vote's message rendered before its commit in this process, one rendered
    after it, one hint, one bare group_send, the same message through each transport floor's sockets),
    so other load on the machine falls on all seven."""
    import websockets
    from channels.layers import get_channel_layer

    from approvals import events as fan_out
    from approvals.live.consumers import CLOCK_MARGIN

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
    # A socket trusts a message rendered at least CLOCK_MARGIN after its own read on connect
    # (consumers.py); before that it re-reads the page. A reviewer's page is open far longer than that:
    # the run starts once the last socket's read is that old, so the first events do not measure the
    # sockets' first moments (in the run of 2026-12-06 on bdb353b, 65 of 2,000 deliveries took the
    # re-read there).
    await asyncio.sleep(CLOCK_MARGIN)
    bare = await _BareGroup.joined(layer, len(cookies))
    floor = await _Floor.connected(layer, floor_urls, "floor")
    floor_process = await _Floor.connected(layer, floor_urls, "floor-process")
    before, after = _Phase(before_commit=True), _Phase(before_commit=False)
    votes = _Votes(proposal, cookies, users)
    baseline, hint_times, hint_lost, daphne_cpu_hint = [], [], 0, 0.0
    load = [os.getloadavg()[0]]
    try:
        for number in range(events):
            await votes.event(number, connections, pids)
            for phase in (before, after):
                await phase.event(layer, group, proposal, connections, pids)

            daphnes_start = _cpu_seconds(pids)
            times, lost = await _sent(layer, group, fan_out.changed_message(proposal.id), connections)
            daphne_cpu_hint += _cpu_seconds(pids) - daphnes_start
            hint_times += times
            hint_lost += lost

            baseline += await bare.send_and_receive()
            await floor.send_and_receive(before.last_message)
            await floor_process.send_and_receive(before.last_message)
            load.append(os.getloadavg()[0])
    finally:
        for socket in [*connections, *floor.sockets, *floor_process.sockets]:
            await socket.close()
        await bare.leave()
        await votes.close()
    extra = {
        "floor_times": floor.times,
        "floor_lost": floor.lost,
        "floor_process_times": floor_process.times,
        "floor_process_lost": floor_process.lost,
        "hint_times": hint_times,
        "hint_lost": hint_lost,
        "after_commit": after.report(events),
        "in_process": {**before.report(events), "times": before.times, "lost": before.lost},
        **votes.report(events),
        "daphne_cpu_ms_per_event_hint": round(1000 * daphne_cpu_hint / events, 1),
        "load_average": f"{min(load):.1f}–{max(load):.1f}",
        "bare_stages_ms": bare.stages(),
    }
    return votes.times, votes.lost, baseline, extra


class _Votes:
    """The measured change: reviewer number N (a different one each event, so every vote counts and none
    reaches the quorum) approves through the page's form, a POST to the Daphne their socket is on, with
    their session's CSRF token and a fresh one-time code (read before the clock, as the person types it).
    The clock starts as the request is sent, and each socket's time is its page update's arrival: the
    request, the view, `cast_vote` rendering the page's message in its transaction, the commit and the
    after-commit send, all in a real Daphne."""

    def __init__(self, proposal, cookies, users):
        import httpx

        self.proposal = proposal
        self.users = users
        self.clients = [
            httpx.AsyncClient(base_url=url, headers={"Cookie": cookie}, timeout=30) for url, cookie in cookies
        ]
        self.csrf = [_cookie(cookie, "csrftoken") for _, cookie in cookies]
        self.times: list[float] = []
        self.answers: list[float] = []
        self.per_event: list[float] = []  # each event's p95 over its sockets, for the spread
        self.lost = self.extra_frames = 0
        self.daphne_cpu = 0.0

    async def event(self, number: int, connections, pids) -> None:
        from tests import factories

        code = factories.totp_code(self.users[number])
        data = {
            "csrfmiddlewaretoken": self.csrf[number],
            "action": "approve",
            "digest": self.proposal.action_digest,
            "reason": "",
            "otp_code": code,
        }
        daphnes_start = _cpu_seconds(pids)

        async def vote():
            answer = await self.clients[number].post(f"/proposals/{self.proposal.id}/decide", data=data)
            return answer, time.perf_counter()

        start = time.perf_counter()
        (answer, answered), *received = await asyncio.gather(vote(), *(_arrival(s) for s in connections))
        if answer.status_code != 302:
            raise SystemExit(f"vote {number} refused: HTTP {answer.status_code} {answer.text[:300]}")
        self.answers.append(answered - start)
        self.daphne_cpu += _cpu_seconds(pids) - daphnes_start
        times = [at - start for at in received if at is not None]
        self.times += times
        self.per_event.append(sorted(times)[int(0.95 * (len(times) - 1))] if times else float("nan"))
        self.lost += sum(at is None for at in received)
        # A vote must be one page update per socket; any further frame is counted, and read here so that
        # the next phase times its own.
        extra = await asyncio.gather(*(_frame_within(s, 0.2) for s in connections))
        self.extra_frames += sum(extra)

    def report(self, events: int) -> dict:
        return {
            "vote_answer_ms": summary(self.answers),
            "vote_daphne_cpu_ms_per_event": round(1000 * self.daphne_cpu / events, 1),
            "vote_extra_frames": self.extra_frames,
            "vote_event_p95_ms": [round(v * 1000, 1) for v in self.per_event],
        }

    async def close(self) -> None:
        for client in self.clients:
            await client.aclose()


def _cookie(header: str, name: str) -> str:
    return next(part.split("=", 1)[1] for part in header.split("; ") if part.startswith(f"{name}="))


async def _frame_within(socket, seconds: float) -> int:
    """1 if the socket had another frame within `seconds` (read and dropped), else 0."""
    try:
        await asyncio.wait_for(socket.recv(), seconds)
    except TimeoutError:
        return 0
    return 1


class _Phase:
    """One way of publishing a vote's change. before_commit: as cast_vote does now (events.proposal_changed
    with render_now): the page's message rendered inside the vote's transaction, with the proposal's row
    locked as cast_vote holds it, and the clock started at the commit. Else as before (and as every other
    change): the clock starts at the commit, then the committing process renders, then sends."""

    def __init__(self, *, before_commit: bool):
        self.before_commit = before_commit
        self.times: list[float] = []
        self.lost = 0
        self.render_cpu = self.daphne_cpu = 0.0
        self.queries = self.size = 0
        self.renders: list[float] = []
        self.after_send: list[float] = []
        self.marks: dict[str, dict] = {}  # event id -> this process's stage timestamps (time.time())
        self.last_message: dict = {}

    async def event(self, layer, group, proposal, connections, pids) -> None:
        from django.db import connection, transaction
        from django.test.utils import CaptureQueriesContext

        from approvals.live.broadcast import rendered_message
        from approvals.models import Proposal

        daphnes_start = _cpu_seconds(pids)
        if self.before_commit:
            with transaction.atomic():
                Proposal.objects.select_for_update().filter(pk=proposal.id).first()  # cast_vote's lock
                render_start, cpu_start = time.perf_counter(), time.process_time()
                with CaptureQueriesContext(connection) as read:
                    message = rendered_message(proposal.id)
                self.render_cpu += time.process_time() - cpu_start
                self.renders.append(time.perf_counter() - render_start)
            wall_start = wall_rendered = time.time()
            start = sent = time.perf_counter()  # the commit
        else:
            wall_start = time.time()
            start, cpu_start = time.perf_counter(), time.process_time()
            with CaptureQueriesContext(connection) as read:
                message = rendered_message(proposal.id)
            self.render_cpu += time.process_time() - cpu_start
            sent = time.perf_counter()
            wall_rendered = time.time()
            self.renders.append(sent - start)
        await layer.group_send(group, message)
        wall_sent = time.time()
        received = await asyncio.gather(*(_arrival(s, wall=True) for s in connections))
        self.queries += len(read)
        self.size = len(json.dumps(message))  # after the clock: not part of the change's way
        self.last_message = message
        arrivals = [at[0] if at else None for at in received]
        self.marks[message["event"]] = {
            "start": wall_start,
            "rendered": wall_rendered,
            "sent": wall_sent,
            "arrivals": [at[1] for at in received if at],
        }
        self.after_send += [at - sent for at in arrivals if at is not None]
        self.daphne_cpu += _cpu_seconds(pids) - daphnes_start
        self.times += [at - start for at in arrivals if at is not None]
        self.lost += sum(at is None for at in arrivals)

    def report(self, events: int) -> dict:
        return {
            "render_queries_per_event": round(self.queries / events, 1),
            "message_bytes": self.size,
            "render_ms": summary(self.renders),
            "from_group_send_ms": summary(self.after_send),
            "render_cpu_ms_per_event": round(1000 * self.render_cpu / events, 1),
            "daphne_cpu_ms_per_event": round(1000 * self.daphne_cpu / events, 1),
            "marks": self.marks,
            **({} if self.before_commit else {"times": self.times, "lost": self.lost}),
        }


async def _sent(layer, group: str, message: dict, sockets: list) -> tuple[list[float], int]:
    """group_send `message`: each socket's time from the send to its next frame, and how many got none."""
    start = time.perf_counter()
    await layer.group_send(group, message)
    arrivals = await asyncio.gather(*(_arrival(s) for s in sockets))
    return [at - start for at in arrivals if at is not None], sum(at is None for at in arrivals)


async def _arrival(socket, wall: bool = False):
    """When the socket's next frame arrived (perf_counter), or None; with `wall`, (perf_counter, time())."""
    try:
        await asyncio.wait_for(socket.recv(), LOST_AFTER_SECONDS)
    except TimeoutError:
        return None
    return (time.perf_counter(), time.time()) if wall else time.perf_counter()


def _stages(marks: dict[str, dict], traces: list[Path]) -> dict:
    """Where the rendered message's time goes, per event, from this process's marks and the Daphnes'
    trace lines (approvals/live/trace.py; all time.time() on one machine), each stage's p50 / p95 over
    the events, in ms from the event's start (the clock before the committing render):
    rendered, group_send returned, first and last socket handler started (across both Daphnes), last
    frame handed to Daphne, first and last frame received here. And per socket: handler start to frame
    handed over, and frame handed over to received here cannot be paired (the client does not know the
    event id of a frame), so "last received - last handed over" stands for the sockets' wire and client
    side."""
    from bench.common import percentile

    handled: dict[str, list[tuple[float, float, str]]] = {}
    for trace_file in traces:
        if not trace_file.exists():
            continue
        for line in trace_file.read_text().splitlines():
            event, _pid, path, received, sent = line.split()
            handled.setdefault(event, []).append((float(received), float(sent), path))
    columns: dict[str, list[float]] = {
        key: []
        for key in (
            "rendered",
            "group_send_returned",
            "first_handler_started",
            "last_handler_started",
            "last_frame_handed_to_daphne",
            "first_received_by_client",
            "last_received_by_client",
            "handler_to_frame_per_socket",
        )
    }
    paths: dict[str, int] = {}
    for event, mark in marks.items():
        lines = handled.get(event, [])
        if not lines or not mark["arrivals"]:
            continue
        start = mark["start"]
        columns["rendered"].append(mark["rendered"] - start)
        columns["group_send_returned"].append(mark["sent"] - start)
        columns["first_handler_started"].append(min(r for r, _, _ in lines) - start)
        columns["last_handler_started"].append(max(r for r, _, _ in lines) - start)
        columns["last_frame_handed_to_daphne"].append(max(s for _, s, _ in lines) - start)
        columns["first_received_by_client"].append(min(mark["arrivals"]) - start)
        columns["last_received_by_client"].append(max(mark["arrivals"]) - start)
        columns["handler_to_frame_per_socket"] += [s - r for r, s, _ in lines]
        for _, _, path in lines:
            paths[path] = paths.get(path, 0) + 1
    result: dict = {
        name: {
            "p50": round(1000 * percentile(values, 0.5), 2),
            "p95": round(1000 * percentile(values, 0.95), 2),
        }
        for name, values in columns.items()
        if values
    }
    result["socket_paths"] = paths  # "message": sent from the message, "read": re-read (should be 0)
    return result


class _BareGroup:
    """The baseline: bare channels joined to a group, one group_send, the time until each receive()."""

    def __init__(self, layer, group: str, channels: list[str]):
        self.layer, self.group, self.channels = layer, group, channels
        self.sent: list[float] = []
        self.last: list[float] = []

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
        self.sent.append(time.perf_counter() - start)
        times = [at - start for at in await asyncio.gather(*(received(c) for c in self.channels))]
        self.last.append(max(times))
        return times

    def stages(self) -> dict:
        """The bare side's stages, ms: group_send returned, last receive() returned (p50 / p95)."""
        from bench.common import percentile

        return {
            name: {"p50": round(1000 * percentile(v, 0.5), 2), "p95": round(1000 * percentile(v, 0.95), 2)}
            for name, v in (("group_send_returned", self.sent), ("last_received", self.last))
            if v
        }

    async def leave(self) -> None:
        for channel in self.channels:
            await self.layer.group_discard(self.group, channel)


class _Floor:
    """The transport floor: sockets on two bare Daphnes (bench/fanout_floor.py) that forward a group message's
    text and do nothing else; each event sends them the text of the message the measured phase just
    sent, so the frames are as large as a real change's."""

    def __init__(self, layer, group: str, sockets: list):
        self.layer, self.group, self.sockets = layer, group, sockets
        self.times: list[float] = []
        self.lost = 0

    @classmethod
    async def connected(cls, layer, urls: list[str], route: str) -> "_Floor":
        """`route`: "floor" (a channel per socket) or "floor-process" (one per Daphne process)."""
        import websockets

        group = f"{route}-{secrets.token_hex(4)}"
        sockets = []
        for url in urls:
            # The Daphne may still be starting: its listening socket holds the handshake until it serves.
            sockets.append(
                await asyncio.wait_for(
                    websockets.connect(url.replace("http://", "ws://") + f"/{route}/{group}/", max_size=None),
                    60,
                )
            )
        return cls(layer, group, sockets)

    async def send_and_receive(self, message: dict) -> None:
        floor_message = {"type": "floor.message", "text": json.dumps(message)}
        times, lost = await _sent(self.layer, self.group, floor_message, self.sockets)
        self.times += times
        self.lost += lost


if __name__ == "__main__":
    print(json.dumps(main(*(int(a) for a in sys.argv[1:3])), indent=2))
