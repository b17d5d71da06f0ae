"""The load test on the production topology: two Daphne processes, two workers,
PostgreSQL + Redis, the demo refund agent, locust driving agents' intake and reviewers' votes.

    make load                                   # LOAD_ARGS="--rates 4 --minutes 3"
    .venv/bin/python bench/load/run.py --rates 2,4,6,8 --minutes 0.75    # a ramp: one stack, rising rates
    .venv/bin/python bench/load/run.py --rates 4 --minutes 3 --name sustainable

What it does: drops and creates the scratch database (LOAD_DATABASE_URL, its name must contain "load"),
migrates, seeds a tenant, an agent, reviewers with TOTP devices and two policies (refunds up to 100
allowed, larger ones need one finance approval; step-up window 900 s), then starts on loopback
(--base-port: Daphne on base and base+1, the agent on base+2) two Daphnes, two `run_worker`s and the
agent, holds a few reviewer WebSockets open on both Daphnes for the whole run, and runs locust headless
(bench/load/locustfile.py) at each rate for --minutes. Then it drains (approves what reviewers left
waiting, through the services, and waits for the workers and the agent), stops every process by PID
and checks:

- every task the users sent reached Reviewer, and every proposal is in a terminal state;
- no decision delivered twice or lost: one continuation per decision, delivered; the agent's ledger has
  one refund per succeeded proposal and no decision twice;
- no HTTP 500 (locust's and both Daphnes' access logs): overload answers 503;
- the WebSockets stayed up (disconnects counted).

The report (markdown + JSON + locust's CSVs) goes to bench/load/results/<name>/. Exit status 1 when a
check failed.
"""

import argparse
import asyncio
import csv
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from approvals.services.votes import cast_vote
from lib.errors import ServiceError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.examples.harness import CHECKOUT_PYTHONPATH  # noqa: E402 (after the path)

RESULTS = ROOT / "bench" / "load" / "results"
DEFAULT_DATABASE = "postgres://postgres@127.0.0.1:5432/reviewer_load"
TERMINAL = {"succeeded", "failed", "rejected", "denied", "expired", "revoked", "cancelled", "superseded"}
PUSH_TOKEN = "load-push-token"  # noqa: S105 (a scratch stack's token)
API_TOKEN = "load-api-token"  # noqa: S105
ACCESS = re.compile(r'"(GET|POST|PUT|DELETE|HEAD|OPTIONS) ([^ ?"]+)[^"]*" (\d{3}) ')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="4", help="refund requests per second, comma-separated steps")
    parser.add_argument("--minutes", type=float, default=3, help="how long each rate runs")
    parser.add_argument("--name", default="", help="results folder name (default: the rates)")
    parser.add_argument("--base-port", type=int, default=int(os.environ.get("LOAD_BASE_PORT", "8240")))
    parser.add_argument("--agent-users", type=int, default=40, help="enough that latency cannot cap the rate")
    parser.add_argument("--reviewer-users", type=int, default=4)
    parser.add_argument("--review-every", type=int, default=10, help="one request in N needs a reviewer")
    parser.add_argument("--watchers", type=int, default=4, help="WebSockets held open for the whole run")
    parser.add_argument("--drain", type=float, default=300, help="seconds to let everything settle")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    out = RESULTS / (args.name or "rates-" + "-".join(f"{r:g}" for r in rates))
    shutil.rmtree(out, ignore_errors=True)
    (out / "logs").mkdir(parents=True)
    stack = Stack(out, args.base_port)
    report = {"rates": rates, "minutes": args.minutes, "load_before": os.getloadavg(), "stages": []}
    try:
        seed = stack.prepare(args)
        stack.start()
        watchers = Watchers(seed, args.watchers).start()
        for rate in rates:
            report["stages"].append(stack.locust(rate, args, seed))
        report["load_after_locust"] = os.getloadavg()
        report["drain"] = stack.drain(args.drain)
        report["watchers"] = watchers.stop()
    finally:
        stack.stop()
    report["checks"] = stack.check(seed)
    report["reviewer_status"] = stack.access_statuses()
    write_report(out, report)
    print((out / "report.md").read_text())
    return 0 if all(c["ok"] for c in report["checks"].values()) else 1


QUOTA_SETTINGS = (
    "AGENT_INTAKE_BURST",
    "AGENT_INTAKE_PER_MINUTE",
    "AGENT_OPEN_PROPOSALS",
    "TENANT_INTAKE_BURST",
    "TENANT_INTAKE_PER_MINUTE",
    "TENANT_OPEN_PROPOSALS",
)


class Stack:
    def __init__(self, out: Path, base_port: int):
        self.out = out
        self.ports = [base_port, base_port + 1]
        self.agent_port = base_port + 2
        self.processes: list[tuple[str, subprocess.Popen]] = []
        self.daphnes = [f"http://127.0.0.1:{p}" for p in self.ports]
        self.agent_state = out / "agent"

    def env(self) -> dict:
        env = {
            **os.environ,
            "PYTHONPATH": CHECKOUT_PYTHONPATH,
            "PYTHONUNBUFFERED": "1",
            "DEBUG": "false",
            "SECRET_KEY": self.secret,
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "DATABASE_URL": self.database,
            "REDIS_URL": os.environ.get("LOAD_REDIS_URL", "redis://127.0.0.1:6379/15"),
            "CHANNELS_PREFIX": os.environ.get("LOAD_CHANNELS_PREFIX", "reviewer-load"),
            "REVIEWER_ISSUER": self.daphnes[0],
            "REVIEWER_DATA_DIR": str(self.out / "data"),
            "REVIEWER_SIGNING_KEY_DIR": str(self.out / "keys"),
            "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
            "SECURE_SSL_REDIRECT": "false",  # plain http on loopback (a proxy terminates TLS in production)
            "SESSION_COOKIE_SECURE": "false",
            "CSRF_COOKIE_SECURE": "false",
            "LOG_LEVEL": "WARNING",
            "AGENT_ALLOWED_NETWORKS": "127.0.0.0/8,::1/128",
            # One agent stands for many here, far past one real agent's intake quota: the limits are
            # raised out of the way (their cost, one lock and one UPDATE per intake, is still paid).
            **{name: "1000000000" for name in QUOTA_SETTINGS},
        }
        for name in ("REVIEWER_SIGNING_KEY", "REVIEWER_SIGNING_KEY_FILE", "SECRET_KEY_FILE"):
            env.pop(name, None)
        return env

    def prepare(self, args) -> dict:
        """A fresh database, migrated and seeded, in this process (which later drains and checks)."""
        import psycopg

        self.database = os.environ.get("LOAD_DATABASE_URL", DEFAULT_DATABASE)
        name = self.database.rsplit("/", 1)[1]
        if "load" not in name:
            raise SystemExit(f"refusing to drop {name!r}: the load test's database name contains 'load'")
        with psycopg.connect(self.database.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{name}"')
        self.secret = secrets.token_urlsafe(40)
        os.environ.update({k: v for k, v in self.env().items() if k not in ("PYTHONPATH",)})
        os.environ["DJANGO_SETTINGS_MODULE"] = "reviewer.settings"
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        from django_otp.plugins.otp_totp.models import TOTPDevice

        import signing_keys as keys
        from tests import factories

        call_command("rotate_signing_key", verbosity=0)  # DEBUG is off: the first key is made by hand
        keys.active_key()
        tenant = factories.make_tenant()
        factories.make_user("requester", tenant=tenant, principal_id="requester", groups=["sales"])
        people = []
        for n in range(max(args.reviewer_users, 1) + args.watchers + 1):
            user = factories.make_user(f"reviewer{n}", tenant=tenant, groups=["finance"])
            key = TOTPDevice.objects.get(user=user).key
            people.append({"username": user.username, "password": factories.PASSWORD, "key": key})
        self.drainer = people[-1]["username"]
        common = {"tool_pattern": "payments.refund", "step_up": "900", "ttl_seconds": 3600}
        factories.make_policy(
            tenant, "small-refunds", outcome="allow", condition="double(args.amount) <= 100.0", **common
        )
        factories.make_policy(
            tenant,
            "large-refunds",
            outcome="require_approval",
            condition="double(args.amount) > 100.0",
            thresholds=[{"group": "finance", "count": 1}],
            **common,
        )
        factories.make_agent(
            tenant,
            push_token=PUSH_TOKEN,
            api_token=API_TOKEN,
            card_url=f"http://127.0.0.1:{self.agent_port}/.well-known/agent-card.json",
        )
        seed = {
            "daphnes": self.daphnes,
            "agent_url": f"http://127.0.0.1:{self.agent_port}",
            "webhooks": [f"{d}/a2a/push/refund-demo/" for d in self.daphnes],
            "push_token": PUSH_TOKEN,
            "reviewers": people[: args.reviewer_users],
            "watchers": people[args.reviewer_users : args.reviewer_users + args.watchers],
            "sent_file": str(self.out / "sent.txt"),
        }
        (self.out / "seed.json").write_text(json.dumps(seed))
        from django.db import connection

        connection.close()
        return seed

    def _spawn(self, name: str, command: list[str]) -> subprocess.Popen:
        log = open(self.out / "logs" / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        process = subprocess.Popen(  # noqa: S603 (our own interpreter and modules)
            command, cwd=ROOT, env=self.env(), stdout=log, stderr=subprocess.STDOUT
        )
        self.processes.append((name, process))
        return process

    def start(self) -> None:
        python = sys.executable
        for n, port in enumerate(self.ports):
            access = self.out / "logs" / f"daphne{n}-access.log"
            self._spawn(
                f"daphne{n}",
                [python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "--access-log", str(access)]
                + ["reviewer.asgi:application"],
            )
        for n in range(2):
            self._spawn(f"worker{n}", [python, "manage.py", "run_worker"])
        self._spawn(
            "agent",
            [python, "-m", "examples.refund_agent", "--port", str(self.agent_port)]
            + ["--reviewer-url", self.daphnes[0], "--api-token", API_TOKEN]
            + ["--state-dir", str(self.agent_state), "--log-level", "warning"],
        )
        import httpx

        for url in [f"{d}/.well-known/jwks.json" for d in self.daphnes] + [
            f"http://127.0.0.1:{self.agent_port}/.well-known/agent-card.json"
        ]:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(url, timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                for name, process in self.processes:
                    if process.poll() is not None:
                        raise RuntimeError(
                            f"{name} exited: {(self.out / 'logs' / f'{name}.log').read_text()}"
                        )
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{url} did not answer within 60 s")
                time.sleep(0.2)  # waiting for a server to start listening

    def locust(self, rate: float, args, seed: dict) -> dict:
        prefix = self.out / f"locust-{rate:g}"
        env = {
            **self.env(),
            "LOAD_SEED": str(self.out / "seed.json"),
            "LOAD_RATE": str(rate),
            "LOAD_AGENT_USERS": str(args.agent_users),
            "LOAD_REVIEWER_USERS": str(args.reviewer_users),
            "LOAD_REVIEW_EVERY": str(args.review_every),
        }
        users = args.agent_users + args.reviewer_users
        command = [sys.executable, "-m", "locust", "-f", str(ROOT / "bench" / "load" / "locustfile.py")]
        command += [
            "--headless",
            "-u",
            str(users),
            "-r",
            str(users),
            "--run-time",
            f"{int(args.minutes * 60)}s",
        ]
        command += ["--csv", str(prefix), "--only-summary", "--stop-timeout", "10", "--loglevel", "WARNING"]
        load = []
        started = time.monotonic()
        with open(self.out / "logs" / f"locust-{rate:g}.log", "wb") as log:
            process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)  # noqa: S603
            while process.poll() is None:
                load.append(os.getloadavg()[0])
                time.sleep(5)  # sampling the load average while locust runs
        return {
            "rate": rate,
            "seconds": round(time.monotonic() - started, 1),
            "load_avg_1m_max": max(load, default=0),
            "load_avg_1m_mean": round(sum(load) / len(load), 2) if load else 0,
            "endpoints": read_stats(Path(f"{prefix}_stats.csv")),
            "failures": read_failures(Path(f"{prefix}_failures.csv")),
        }

    def drain(self, seconds: float) -> dict:
        """Approve what the reviewers left waiting (through the services, as a reviewer), then wait until
        every proposal is terminal or `seconds` passed."""
        from django.contrib.auth import get_user_model
        from django.db import close_old_connections
        from django.utils import timezone

        from accounts.stepup import SESSION, StepUp
        from approvals.models import Proposal

        drainer = get_user_model().objects.get(username=self.drainer)
        started = time.monotonic()
        voted = 0
        while True:
            close_old_connections()
            for proposal in Proposal.objects.filter(state="awaiting_review"):
                try:
                    cast_vote(
                        proposal.id,
                        drainer,
                        verdict="approve",
                        digest_seen=proposal.action_digest,
                        step_up=StepUp(SESSION, timezone.now()),
                    )
                    voted += 1
                except ServiceError:
                    pass  # decided meanwhile
            open_states = Counter(
                Proposal.objects.exclude(state__in=TERMINAL).values_list("state", flat=True)
            )
            if not open_states or time.monotonic() - started > seconds:
                return {
                    "seconds": round(time.monotonic() - started, 1),
                    "approved_by_drain": voted,
                    "still_open": dict(open_states),
                }
            time.sleep(1)  # giving the workers and the agent time to settle what is in flight

    def stop(self) -> None:
        for _name, process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for _name, process in reversed(self.processes):
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def access_statuses(self) -> dict:
        statuses: Counter = Counter()
        by_path: Counter = Counter()
        for n in range(len(self.ports)):
            path = self.out / "logs" / f"daphne{n}-access.log"
            if not path.exists():
                continue
            for line in path.read_text(errors="replace").splitlines():
                match = ACCESS.search(line)
                if match:
                    statuses[match.group(3)] += 1
                    if match.group(3) >= "500":
                        route = re.sub(r"[0-9a-f-]{36}", "[id]", match.group(2))
                        by_path[f"{match.group(1)} {route} {match.group(3)}"] += 1
        return {"by_status": dict(sorted(statuses.items())), "5xx_by_path": dict(by_path)}

    def check(self, seed: dict) -> dict:
        from django.db import close_old_connections

        from approvals.models import Decision, OutboxMessage, Proposal

        close_old_connections()
        sent = (
            [line.split()[0] for line in Path(seed["sent_file"]).read_text().splitlines() if line.strip()]
            if Path(seed["sent_file"]).exists()
            else []
        )
        known = set(Proposal.objects.filter(task_id__in=sent).values_list("task_id", flat=True))
        states = Counter(Proposal.objects.values_list("state", flat=True))
        not_terminal = {s: c for s, c in states.items() if s not in TERMINAL}
        continuations = Counter(
            OutboxMessage.objects.filter(kind="continue").values_list("proposal_id", flat=True)
        )
        undelivered = OutboxMessage.objects.filter(kind="continue").exclude(status="delivered").count()
        decisions = Decision.objects.count()
        ledger = self.agent_state / "ledger.jsonl"
        lines = [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []
        keys = Counter(str(line.get("idempotency_key") or line.get("jti") or line) for line in lines)
        statuses = self.access_statuses()["by_status"]
        return {
            "every sent task reached Reviewer": {
                "ok": len(known) == len(set(sent)),
                "sent": len(set(sent)),
                "in Reviewer": len(known),
            },
            "every proposal terminal": {"ok": not not_terminal, "states": dict(states), "open": not_terminal},
            "one continuation per decision, delivered": {
                "ok": len(continuations) == decisions
                and max(continuations.values(), default=1) == 1
                and undelivered == 0,
                "decisions": decisions,
                "continuations": sum(continuations.values()),
                "undelivered": undelivered,
            },
            "agent ledger: one refund per succeeded proposal, none twice": {
                "ok": len(lines) == states.get("succeeded", 0) and max(keys.values(), default=1) == 1,
                "ledger lines": len(lines),
                "succeeded": states.get("succeeded", 0),
                "twice": sum(1 for c in keys.values() if c > 1),
            },
            "no HTTP 500": {
                "ok": not any(s.startswith("5") and s != "503" for s in statuses),
                "statuses": statuses,
            },
        }


class Watchers:
    """Reviewers' queue pages left open: WebSockets on both Daphnes for the whole run, counting what they
    receive and every time one closes (each is reopened at once, so a flapping socket shows)."""

    def __init__(self, seed: dict, count: int):
        self.seed = seed
        self.count = count
        self.stats = {"sockets": count, "opened": 0, "disconnects": 0, "messages": 0, "close_codes": []}
        self.stopping = threading.Event()

    def start(self) -> "Watchers":
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self.thread.start()
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
            except OSError as error:
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


def read_stats(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    with path.open() as f:
        for row in csv.DictReader(f):
            rows.append(
                {
                    "name": f"{row['Type']} {row['Name']}".strip(),
                    "requests": int(row["Request Count"]),
                    "failures": int(row["Failure Count"]),
                    "p50_ms": row["50%"],
                    "p95_ms": row["95%"],
                    "rps": round(float(row["Requests/s"]), 2),
                }
            )
    return rows


def read_failures(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open() as f:
        return [
            {"name": f"{r['Method']} {r['Name']}", "error": r["Error"][:160], "count": int(r["Occurrences"])}
            for r in csv.DictReader(f)
        ]


def write_report(out: Path, report: dict) -> None:
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    status = report["reviewer_status"]
    lines = [
        f"# Load test: {', '.join(f'{r:g}' for r in report['rates'])} refund requests/s, "
        f"{report['minutes']:g} min each",
        "",
        "Two Daphne processes, two workers, PostgreSQL + Redis, the demo refund agent, locust; all on one",
        f"shared 2-core machine (other sessions were running). Load average before: "
        f"{', '.join(f'{x:.2f}' for x in report['load_before'])}.",
        "",
    ]
    for stage in report["stages"]:
        lines += [
            f"## {stage['rate']:g} requests/s offered ({stage['seconds']} s; load average 1 min: mean "
            f"{stage['load_avg_1m_mean']}, max {stage['load_avg_1m_max']:.2f})",
            "",
            "| endpoint | requests | failures | req/s | p50 ms | p95 ms |",
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
    lines += [
        "## Reviewer's answers (both Daphnes' access logs: locust, the agent, the workers)",
        "",
        f"{status['by_status']}; 5xx by path: {status['5xx_by_path'] or 'none'}",
        "",
        f"Drain: {report.get('drain')}",
        "",
        f"WebSockets held open: {report.get('watchers')}",
        "",
        "## Checks",
        "",
    ]
    for name, check in report["checks"].items():
        detail = {k: v for k, v in check.items() if k != "ok"}
        lines.append(f"- {'PASS' if check['ok'] else 'FAIL'} {name}: {detail}")
    (out / "report.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
