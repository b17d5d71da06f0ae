"""What bench/load/run.py does after (and between) locust's steps: the knee rule, the drain, the checks,
the report; and the WebSocket watchers held open for the whole run."""

import asyncio
import csv
import json
import re
import threading
import time
from collections import Counter
from pathlib import Path

TERMINAL = {"succeeded", "failed", "rejected", "denied", "expired", "revoked", "cancelled", "superseded"}
ACCESS = re.compile(r'"(GET|POST|PUT|DELETE|HEAD|OPTIONS) ([^ ?"]+)[^"]*" (\d{3}) ')
SENT_SHARE = 0.9  # a step that sent less than this share of what it offered did not offer the load
LONG_POLL = "GET decision (long poll)"  # waits for a person: not a latency
# Not timed for the knee either: each reviewer signs in once per step (a password hash, slow on
# purpose), and the whole-call lines are sums of the timed requests.
UNTIMED = ("CALL ", f"GET {LONG_POLL}", "GET GET /accounts/login/", "POST POST /accounts/login/")
# Whose a request is. The agents here call only the REST API (locustfile's Agent, the drain); everything
# else is a person's: reviewers' pages, sign-in and votes (locustfile's Reviewer), the watchers' sign-in.
AGENT_ROUTES = ("/api/", "/a2a/")
# locustfile's Reviewer's lines, as locust's failures name them (method, then the request's name).
PEOPLE_LINES = (
    "GET GET /accounts/login/",
    "POST POST /accounts/login/",
    "GET GET / (queue)",
    "GET GET /proposals/[id]/",
    "POST POST /proposals/[id]/decide",
)
REFUSED = ("429", "503")
ALLOWED_CALL = "CALL allowed call"  # locustfile's whole policy-allowed call: submit, verify, consume, outcome


def sent_calls(seed: dict, stage: str) -> int:
    path = Path(seed["calls_file"])
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines() if line.split(" ", 1)[0] == stage)


def timed(stage: dict) -> list[dict]:
    """The step's request lines whose latency counts (locust's CSV, not the whole-call lines)."""
    return [e for e in stage["endpoints"] if not e["name"].startswith(UNTIMED)]


def under_knee(stage: dict, p95_ms: float, call_p95_ms: float) -> bool:
    """p95 under `p95_ms` on every timed request, the whole allowed call's p95 (its requests and the
    gate's verify, what the agent waits for) under `call_p95_ms`, no failed or refused request, and the
    load offered."""
    aggregate = next((e for e in stage["endpoints"] if e["name"] == "Aggregated"), None)
    lines = [e for e in timed(stage) if e["name"] != "Aggregated"]
    call = next((e for e in stage["endpoints"] if e["name"] == ALLOWED_CALL), None)
    stage["p95_ms"] = max((float(e["p95_ms"] or 0) for e in lines), default=None)
    stage["call_p95_ms"] = float(call["p95_ms"] or 0) if call and call["requests"] else None
    stage["requests"] = sum(e["requests"] for e in lines)
    stage["failed"] = sum(e["failures"] for e in stage["endpoints"] if e["name"] != "Aggregated")
    return bool(
        aggregate
        and lines
        and stage["p95_ms"] is not None
        and stage["p95_ms"] < p95_ms
        and stage["call_p95_ms"] is not None
        and stage["call_p95_ms"] < call_p95_ms
        and stage["failed"] == 0
        and stage["sent"] >= SENT_SHARE * stage["offered"]
    )


def drain(seed: dict, seconds: float) -> dict:
    """Settle what the steps left open: approve what waits for a reviewer (through the services, as a
    reviewer), and play the agent for the calls locust stopped in the middle of (verify, consume, act,
    report), until every proposal is terminal or `seconds` passed."""
    import httpx
    from django.contrib.auth import get_user_model
    from django.db import close_old_connections
    from django.utils import timezone

    from accounts.stepup import SESSION, StepUp
    from approvals.models import Proposal
    from approvals.services.votes import cast_vote
    from lib.errors import ServiceError
    from reviewer_gate.gate import Gate, GateError, MemoryUsedStore, StaticKeySource

    drainer = get_user_model().objects.get(username=seed["drainer"])
    gate = Gate(
        issuer=seed["issuer"],
        audience=seed["audience"],
        keys=StaticKeySource(seed["jwks"]),
        used_store=MemoryUsedStore(),
        tenant=seed["tenant"],
    )
    acts = Path(seed["acts_file"])
    http = httpx.Client(
        base_url=seed["daphnes"][0], headers={"Authorization": f"Bearer {seed['api_token']}"}, timeout=30
    )
    started = time.monotonic()
    done = Counter()
    # What the load left unfinished when it stopped: the drain's share of the run's work, reported
    # beside PASS (an overload step can leave much of its work to be settled after it).
    proposals = Proposal.objects.count()
    open_at_stop = Proposal.objects.exclude(state__in=TERMINAL).count()
    while True:
        close_old_connections()
        acted = {line.split()[0] for line in acts.read_text().splitlines()} if acts.exists() else set()
        for proposal in Proposal.objects.filter(state="awaiting_review"):
            try:
                cast_vote(
                    proposal.id,
                    drainer,
                    verdict="approve",
                    digest_seen=proposal.action_digest,
                    step_up=StepUp(SESSION, timezone.now()),
                )
                done["approved"] += 1
            except ServiceError:
                pass  # decided meanwhile
        for proposal in Proposal.objects.filter(state__in=("allowed", "approved")).select_related("decision"):
            try:
                decision = gate.verify(
                    proposal.decision.token,
                    task_id=proposal.task_id,
                    request_id=proposal.request_id,
                    action_digest=proposal.action_digest,
                )
            except GateError:
                continue
            if http.post(f"/api/v1/decisions/{decision.jti}/consume", json={"rev": decision.rev}).is_success:
                with acts.open("a") as file:
                    file.write(f"{decision.jti} {proposal.task_id} drain\n")
                acted.add(decision.jti)
                done["released"] += 1
        for proposal in Proposal.objects.filter(state="executing").select_related("decision"):
            jti = str(proposal.decision.jti)
            # Consumed by a call locust stopped before it acted: the agent never acted, so it says so.
            status = "succeeded" if jti in acted else "failed"
            http.post(
                f"/api/v1/decisions/{jti}/outcome", json={"status": status, "transaction_id": f"tx-{jti}"}
            )
            done[f"reported {status}"] += 1
        open_states = Counter(Proposal.objects.exclude(state__in=TERMINAL).values_list("state", flat=True))
        if not open_states or time.monotonic() - started > seconds:
            http.close()
            return {
                "seconds": round(time.monotonic() - started, 1),
                "proposals": proposals,
                "open_when_load_stopped": open_at_stop,
                "settled_after_load_stopped": open_at_stop - sum(open_states.values()),
                **done,
                "still_open": dict(open_states),
            }
        time.sleep(1)  # giving the worker and Reviewer time to settle what is in flight


def access_statuses(logs: list[Path]) -> dict:
    """Every Daphne's answers by status; the 4xx/5xx by route; the 429s and 503s agents and people got."""
    statuses: Counter = Counter()
    by_path: Counter = Counter()
    refused: dict[str, Counter] = {"agents": Counter(), "people": Counter()}
    for path in logs:
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            match = ACCESS.search(line)
            if match:
                statuses[match.group(3)] += 1
                if match.group(3) >= "429":
                    route = re.sub(r"[0-9a-f-]{36}", "[id]", match.group(2))
                    by_path[f"{match.group(1)} {route} {match.group(3)}"] += 1
                if match.group(3) in REFUSED:
                    whose = "agents" if match.group(2).startswith(AGENT_ROUTES) else "people"
                    refused[whose][match.group(3)] += 1
    return {
        "by_status": dict(sorted(statuses.items())),
        "refused_by_path": dict(by_path),
        "refused_agents": {status: refused["agents"][status] for status in REFUSED},
        "refused_people": {status: refused["people"][status] for status in REFUSED},
    }


def people_refused(logs: list[Path], stages: list[dict]) -> dict:
    """The check that agents never crowd people out: no reviewer request (page, sign-in, vote) got a 503,
    in any step, the one at four times the knee included (Reviewer's own log, and locust's view of each
    step); agents' 429s and 503s are reported beside it, as the refusals they are meant to get."""
    statuses = access_statuses(logs)
    by_step = {
        stage["name"]: sum(
            f["count"]
            for f in stage["failures"]
            if f["name"] in PEOPLE_LINES and re.search(r"\b503\b", f["error"])
        )
        for stage in stages
    }
    return {
        "ok": bool(statuses["by_status"])
        and statuses["refused_people"]["503"] == 0
        and not any(by_step.values()),
        "people's 503s (Daphnes' logs)": statuses["refused_people"]["503"],
        "people's 503s by step (locust)": by_step,
        "people's 429s (Daphnes' logs)": statuses["refused_people"]["429"],
        "agents' 503s": statuses["refused_agents"]["503"],
        "agents' 429s": statuses["refused_agents"]["429"],
    }


def offered(stages: list[dict]) -> dict:
    """The check that the load was offered: every step sent at least SENT_SHARE of its calls (and
    some), so a harness that could not send fails instead of passing on no load."""
    short = [s["name"] for s in stages if s["sent"] < SENT_SHARE * s["offered"] or not s["sent"]]
    return {
        "ok": not short and bool(stages),
        "steps short of it": short,
        "sent / offered": {s["name"]: f"{s['sent']} / {s['offered']}" for s in stages},
    }


def check(seed: dict, logs: list[Path], result: dict) -> dict:
    from django.db import close_old_connections
    from django.db.models import Count

    from approvals.models import Proposal
    from audit.chain.sequencer import sequence_pending
    from audit.chain.verification import all_chains, verify_chain

    close_old_connections()
    calls_file = Path(seed["calls_file"])
    lines = calls_file.read_text().splitlines() if calls_file.exists() else []
    calls = {line.split()[1] for line in lines}  # a call's task id: one per call, however often refused
    accepted_file = Path(seed["accepted_file"])
    accepted = set(accepted_file.read_text().split()) if accepted_file.exists() else set()
    known = set(Proposal.objects.filter(task_id__in=calls).values_list("task_id", flat=True))
    twice_tasks = Proposal.objects.values("task_id").annotate(n=Count("id")).filter(n__gt=1).count()
    states = Counter(Proposal.objects.values_list("state", flat=True))
    not_terminal = {s: c for s, c in states.items() if s not in TERMINAL}
    acts_file = Path(seed["acts_file"])
    acts = [line.split()[0] for line in acts_file.read_text().splitlines()] if acts_file.exists() else []
    acted_twice = sum(1 for n in Counter(acts).values() if n > 1)
    sequence_pending()  # what the worker had not chained yet when it stopped
    chains = [verify_chain(chain) for chain in all_chains()]
    statuses = access_statuses(logs)["by_status"]
    locust_5xx = sum(
        f["count"]
        for s in result["stages"]
        for f in s["failures"]
        # the status as locust words it ("HTTP 500", "500 Server Error"), not a number in a page's text
        if re.search(r"HTTP 5(?!03)\d\d\b|\b5(?!03)\d\d Server Error", f["error"])
    )
    return {
        "the load was offered (every step sent ≥ 90% of what it offered)": offered(result["stages"]),
        "nothing lost: every call Reviewer accepted has its proposal": {
            "ok": bool(accepted) and accepted <= known,
            "calls": len(calls),
            "accepted": len(accepted),
            "in Reviewer": len(known),
            "accepted, no proposal": len(accepted - known),
            # refused with 429/503 on every attempt until locust stopped: the agent still holds these
            "refused until the run stopped": len(calls - accepted - known),
        },
        "every accepted proposal settled": {
            "ok": bool(states) and not not_terminal,
            "states": dict(states),
            "open": not_terminal,
        },
        "nothing twice: one proposal per call, one act per decision and per succeeded proposal": {
            "ok": twice_tasks == 0 and acted_twice == 0 and len(set(acts)) == states.get("succeeded", 0),
            "tasks with two proposals": twice_tasks,
            "decisions acted on twice": acted_twice,
            "acts": len(acts),
            "succeeded": states.get("succeeded", 0),
        },
        "the audit chain verifies": {
            "ok": bool(chains) and all(r.ok for r in chains),
            "events": sum(r.events for r in chains),
            "problems": [p for r in chains for p in r.problems][:5],
        },
        "overload answered 429/503 only, never a 500": {
            "ok": bool(statuses)
            and not any(s.startswith("5") and s != "503" for s in statuses)
            and not locust_5xx,
            "statuses": statuses,
            "5xx seen by locust (other than 503)": locust_5xx,
        },
        "people never refused: no reviewer page, sign-in or vote got a 503": people_refused(
            logs, result["stages"]
        ),
        "the WebSockets stayed up": {
            "ok": bool(result.get("watchers"))
            and result["watchers"]["opened"] >= result["watchers"]["sockets"]
            and result["watchers"]["disconnects"] == 0,
            **result.get("watchers", {}),
        },
    }


def read_stats(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open() as f:
        return [
            {
                "name": f"{row['Type']} {row['Name']}".strip(),
                "requests": int(row["Request Count"]),
                "failures": int(row["Failure Count"]),
                "p50_ms": row["50%"],
                "p95_ms": row["95%"],
                "rps": round(float(row["Requests/s"]), 2),
            }
            for row in csv.DictReader(f)
        ]


def read_failures(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open() as f:
        return [
            {"name": f"{r['Method']} {r['Name']}", "error": r["Error"][:160], "count": int(r["Occurrences"])}
            for r in csv.DictReader(f)
        ]


def drain_words(drain: dict) -> str:
    """What the drain finished after the load stopped, as a share of the run's proposals."""
    if "proposals" not in drain:
        return f"Drain: {drain}"
    total, settled = drain["proposals"], drain["settled_after_load_stopped"]
    share = f"{100 * settled / total:.0f}%" if total else "-"
    work = {k: v for k, v in drain.items() if k not in ("seconds", "proposals", "still_open")}
    return (
        f"Drain: {drain['open_when_load_stopped']} of {total} proposals were open when the load stopped; "
        f"{settled} of them ({share} of the run's proposals) settled after it, in {drain['seconds']:g} s "
        f"of drain (its work: {work}); still open: {drain['still_open'] or 'none'}."
    )


def write_report(out: Path, report: dict) -> None:
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    lines = [
        "# Load test of Reviewer: REST pull agents, reviewers through the pages, sockets open",
        "",
        "All on one shared 2-core machine (other work was running). Load average before: "
        f"{', '.join(f'{x:.2f}' for x in report['load_before'])}; after: "
        f"{', '.join(f'{x:.2f}' for x in report['load_after'])}.",
        "",
        f"A step is under the knee rule when every timed request's p95 is under {report['args']['p95_ms']:g} "
        f"ms, the whole allowed call's p95 (submit, verify, consume, outcome) under "
        f"{report['args']['call_p95_ms']:g} ms, no request failed or was refused, and it sent at least "
        f"{SENT_SHARE:.0%} of the calls it offered.",
        "",
        "| HTTP processes | knee (calls/s) | step | sent / offered | requests | p95 ms (worst timed line) "
        "| allowed call p50 / p95 ms | failed | load avg mean / max | under the knee rule |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for config in report["configurations"]:
        for stage in config["stages"]:
            call = next((e for e in stage["endpoints"] if e["name"] == ALLOWED_CALL), {})
            lines.append(
                f"| {config['processes']} | {config['knee']} | {stage['name']} | {stage['sent']} / "
                f"{stage['offered']} | {stage.get('requests')} | {stage.get('p95_ms')} | "
                f"{call.get('p50_ms', '-')} / {call.get('p95_ms', '-')} | {stage.get('failed')} | "
                f"{stage['load_avg_1m_mean']} / {stage['load_avg_1m_max']:.2f} | "
                f"{'yes' if stage['under_knee'] else 'no'} |"
            )
    for config in report["configurations"]:
        lines += ["", f"## {config['processes']} HTTP process(es)", ""]
        for stage in config["stages"]:
            lines += [
                f"### {stage['name']} ({stage['seconds']:g} s; load average 1 min mean "
                f"{stage['load_avg_1m_mean']}, max {stage['load_avg_1m_max']:.2f}; locust exit "
                f"{stage['locust_exit']})",
                "",
                "| line | requests | failures | req/s | p50 ms | p95 ms |",
                "|---|---|---|---|---|---|",
            ]
            lines += [
                f"| {e['name']} | {e['requests']} | {e['failures']} | {e['rps']} | {e['p50_ms']} "
                f"| {e['p95_ms']} |"
                for e in stage["endpoints"]
            ]
            if stage["failures"]:
                lines += ["", "| failure | count |", "|---|---|"]
                lines += [f"| {f['name']}: {f['error']} | {f['count']} |" for f in stage["failures"]]
            lines.append("")
        status = config["reviewer_status"]
        lines += [
            f"Reviewer's answers (every Daphne's access log): {status['by_status']}; refused by path: "
            f"{status['refused_by_path'] or 'none'}; refused, agents: {status['refused_agents']}, "
            f"people: {status['refused_people']}",
            "",
            drain_words(config.get("drain") or {}),
            "",
            f"WebSockets held open: {config.get('watchers')}",
            "",
            "Checks:",
            "",
        ]
        for name, check in config["checks"].items():
            detail = {k: v for k, v in check.items() if k != "ok"}
            lines.append(f"- {'PASS' if check['ok'] else 'FAIL'} {name}: {detail}")
    (out / "report.md").write_text("\n".join(lines) + "\n")


class Watchers:
    """Reviewers' queue pages left open: WebSockets on both Daphnes for the whole run, counting what they
    receive and every time one closes (each is reopened at once, so a flapping socket shows)."""

    def __init__(self, seed: dict, count: int):
        self.seed = seed
        self.count = count
        self.stats = {"sockets": count, "opened": 0, "disconnects": 0, "messages": 0, "close_codes": []}
        self.stopping = threading.Event()

    def start(self, seconds: float = 120) -> "Watchers":
        """Open them, and wait (at most `seconds`: each signs in first) until every one is open, so the
        first step runs with its sockets."""
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self.thread.start()
        deadline = time.monotonic() + seconds
        while self.stats["opened"] < self.count and time.monotonic() < deadline:
            time.sleep(0.5)  # polling the watchers' own counter, with a deadline
        return self

    def stop(self) -> dict:
        self.stopping.set()
        self.thread.join(timeout=15)
        return self.stats

    async def _run(self) -> None:
        await asyncio.gather(*(self._watch(n) for n in range(self.count)))

    async def _watch(self, n: int) -> None:
        import websockets

        base = self.seed["daphnes"][n % len(self.seed["daphnes"])]
        person = self.seed["watchers"][n]
        cookie = await asyncio.to_thread(sign_in, base, person)
        while not self.stopping.is_set():
            try:
                async with websockets.connect(
                    base.replace("http", "ws") + "/ws/queue/",
                    additional_headers={"Cookie": cookie, "Origin": base},
                ) as socket:
                    self.stats["opened"] += 1
                    while not self.stopping.is_set():
                        try:
                            await asyncio.wait_for(socket.recv(), timeout=1)
                            self.stats["messages"] += 1
                        except TimeoutError:
                            continue
            except websockets.ConnectionClosed as closed:
                self.stats["disconnects"] += 1
                self.stats["close_codes"].append(getattr(closed.rcvd, "code", None))
            except (OSError, websockets.exceptions.WebSocketException) as error:
                # Refused or a failed handshake (a Daphne too busy to answer it): counted, and reopened.
                self.stats["disconnects"] += 1
                self.stats["close_codes"].append(repr(error)[:80])
                await asyncio.sleep(1)  # backoff before reopening a refused socket


def sign_in(base: str, person: dict) -> str:
    """Sign in with password and a code from the device secret; returns the Cookie header."""
    import httpx

    from bench.load.totp import code_now

    with httpx.Client(base_url=base, timeout=30) as client:
        page = client.get("/accounts/login/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        client.post(
            "/accounts/login/",
            data={
                "csrfmiddlewaretoken": csrf,
                "username": person["username"],
                "password": person["password"],
                "otp_token": code_now(person["key"]),
            },
            headers={"Referer": f"{base}/accounts/login/"},
        )
        return "; ".join(f"{k}={v}" for k, v in client.cookies.items())
