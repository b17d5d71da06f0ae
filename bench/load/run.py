"""The load test of Reviewer itself: REST agents (pull agents, no demo agent in the path) at stepped
rates, reviewers through the pages, sockets open; the knee for one HTTP process and for two, then a
run at four times the knee whose checks must pass.

    make load                                                   # LOAD_ARGS="--processes 1,2 ..."
    .venv/bin/python bench/load/run.py --processes 1,2 --rates 0.5,1,2,4,8,12,16,24 --step-seconds 25
    .venv/bin/python bench/load/run.py --processes 2 --rates 8 --quad-rate 32 --name quick

For each process count (`--processes`): a fresh scratch database (LOAD_DATABASE_URL, its name must
contain "load"; dropped and created), migrated and seeded (a tenant, a pull agent registered without
a card URL, reviewers with TOTP devices, two policies: refunds up to 100 allowed, larger ones need one
finance approval, step-up window 900 s); that many Daphnes on loopback (--base-port onwards) and one
`run_worker`; WebSockets held open on every Daphne for the whole run; then locust headless
(bench/load/locustfile.py) at each rate of `--rates` for --step-seconds, stopping after the first
step past the knee. The knee is the highest rate whose step had p95 < --p95-ms on every timed line
(each endpoint's requests; the decision's long poll, which waits for a person, and the reviewers'
one sign-in per step aside) and p95 < --call-p95-ms on the whole allowed call (its requests and the
gate's verify: what the agent waits for), not one failed or refused request, and sent at least 90% of
what it offered. Calls arrive open-loop on a fixed schedule (bench/load/locustfile.py). On the last process
count, one more step at four times its knee (--quad-rate overrides) for --quad-seconds. Then it
drains (approves what reviewers left, and plays the agent for the calls locust stopped in the middle
of), stops every process by PID and checks (bench/load/checks.py):

- the load was offered: every step sent at least 90% of the calls it offered (a harness that could
  not send, e.g. locust missing or starved, fails here instead of passing on no load);
- nothing lost: every call Reviewer accepted has its proposal (one refused with 429/503 until the run
  stopped is counted apart: refused, not lost), every accepted proposal settled;
- nothing twice: one proposal per call, no decision acted on twice, one act per succeeded proposal;
- the audit chain verifies;
- overload is answered 429 or 503, never a 500 (locust's view and every Daphne's access log);
- people are never refused: no reviewer page, sign-in or vote got a 503 in any step, the one at four
  times the knee included (agents' 429s and 503s are counted apart);
- the WebSockets stayed up.

The report (markdown + JSON + locust's CSVs) goes to bench/load/results/<name>/, with what the drain
settled after the load stopped (how many of the run's proposals were still open, and their share);
exit status 1 when a check failed.
"""

import argparse
import importlib.util
import json
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from bench.load import checks  # noqa: E402 (after the path)
from tests.examples.harness import CHECKOUT_PYTHONPATH  # noqa: E402

RESULTS = ROOT / "bench" / "load" / "results"
DEFAULT_DATABASE = "postgres://postgres@127.0.0.1:5432/reviewer_load"
# Locust runs this much longer than the arrivals: its start (spawning, the reviewers' sign-in) and the
# calls still under way when the schedule ends.
SLACK = 15
API_TOKEN = "load-api-token"  # noqa: S105 (a scratch stack's token)
AGENT = "load-agent"
SECRET = secrets.token_urlsafe(40)
# Outside the results folder (which is kept): the servers' logs, data folder and signing keys.
SCRATCH = Path(tempfile.mkdtemp(prefix="reviewer-load-"))


def default_run_name() -> str:
    """A run is named by what it measured: the day and the commit checked out."""
    commit = subprocess.run(  # noqa: S603 (git, a fixed argument list)
        ["git", "rev-parse", "--short=7", "HEAD"],  # noqa: S607 (git from PATH, as make does)
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return f"knee-{time.strftime('%Y-%m-%d', time.gmtime())}-{commit or 'nocommit'}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", default="1,2", help="HTTP process counts, comma-separated")
    parser.add_argument("--rates", default="0.5,1,2,4,8,12,16,24", help="agent calls/s, the steps")
    parser.add_argument("--step-seconds", type=float, default=25)
    parser.add_argument("--quad-seconds", type=float, default=45)
    parser.add_argument("--quad-rate", type=float, default=0, help="the overload step's rate (4x the knee)")
    parser.add_argument("--p95-ms", type=float, default=250, help="the knee's bound on each request's p95")
    parser.add_argument(
        "--call-p95-ms", type=float, default=250, help="the knee's bound on the whole allowed call's p95"
    )
    parser.add_argument("--name", default="", help="results folder name (default: knee-<date>-<commit>)")
    parser.add_argument("--base-port", type=int, default=int(os.environ.get("LOAD_BASE_PORT", "8240")))
    parser.add_argument("--reviewer-users", type=int, default=3)
    parser.add_argument("--review-every", type=int, default=10, help="one call in N needs a reviewer")
    parser.add_argument("--watchers", type=int, default=2, help="WebSockets held open per Daphne")
    parser.add_argument("--drain", type=float, default=180, help="seconds to let everything settle")
    args = parser.parse_args()
    if importlib.util.find_spec("locust") is None:  # found, not imported: it patches the process
        print("FAIL: locust is not installed (the `bench` extra; `make load` installs it)", file=sys.stderr)
        return 2
    counts = [int(n) for n in args.processes.split(",")]
    rates = [float(r) for r in args.rates.split(",")]
    out = RESULTS / (args.name or default_run_name())
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    report = {"args": vars(args), "load_before": os.getloadavg(), "configurations": []}
    for number, count in enumerate(counts):
        last = number == len(counts) - 1
        report["configurations"].append(run_configuration(out / f"{count}-process", count, rates, args, last))
    report["load_after"] = os.getloadavg()
    checks.write_report(out, report)
    print((out / "report.md").read_text())
    failed = [
        f"{c['processes']} process(es): {name}"
        for c in report["configurations"]
        for name, check in c["checks"].items()
        if not check["ok"]
    ]
    for line in failed:
        print(f"FAIL {line}", file=sys.stderr)
    print(f"servers' logs: {SCRATCH}", file=sys.stderr)
    return 1 if failed else 0


def run_configuration(out: Path, count: int, rates: list[float], args, overload: bool) -> dict:
    out.mkdir(parents=True)
    stack = Stack(out, args.base_port, count)
    result = {"processes": count, "stages": [], "knee": None}
    try:
        seed = stack.prepare(args)
        stack.start()
        watchers = checks.Watchers(seed, args.watchers * count).start()
        for rate in rates:
            stage = stack.locust(rate, args.step_seconds, args, seed)
            stage["under_knee"] = checks.under_knee(stage, args.p95_ms, args.call_p95_ms)
            result["stages"].append(stage)
            if not stage["under_knee"]:
                break
            result["knee"] = rate
        if overload:
            quad = args.quad_rate or 4 * (result["knee"] or rates[0])
            stage = stack.locust(quad, args.quad_seconds, args, seed, name="4x knee")
            stage["under_knee"] = checks.under_knee(stage, args.p95_ms, args.call_p95_ms)
            result["stages"].append(stage)
        result["drain"] = checks.drain(seed, args.drain)
        result["watchers"] = watchers.stop()
    finally:
        stack.stop()
    result["checks"] = checks.check(seed, stack.access_logs(), result)
    result["reviewer_status"] = checks.access_statuses(stack.access_logs())
    return result


QUOTA_SETTINGS = (
    "AGENT_INTAKE_BURST",
    "AGENT_INTAKE_PER_MINUTE",
    "AGENT_OPEN_PROPOSALS",
    "TENANT_INTAKE_BURST",
    "TENANT_INTAKE_PER_MINUTE",
    "TENANT_OPEN_PROPOSALS",
)


class Stack:
    def __init__(self, out: Path, base_port: int, count: int):
        self.out = out  # what is kept: the locust CSVs (the report is written next to them)
        self.work = SCRATCH / out.name  # logs, seed, the calls and acts files: a scratch folder
        (self.work / "logs").mkdir(parents=True)
        self.ports = [base_port + n for n in range(count)]
        self.processes: list[tuple[str, subprocess.Popen]] = []
        self.daphnes = [f"http://127.0.0.1:{p}" for p in self.ports]

    def env(self) -> dict:
        env = {
            **os.environ,
            "PYTHONPATH": CHECKOUT_PYTHONPATH,
            "PYTHONUNBUFFERED": "1",
            "DEBUG": "false",
            "SECRET_KEY": SECRET,
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "DATABASE_URL": self.database,
            "REDIS_URL": os.environ.get("LOAD_REDIS_URL", "redis://127.0.0.1:6379/15"),
            "CHANNELS_PREFIX": os.environ.get("LOAD_CHANNELS_PREFIX", "reviewer-load"),
            "REVIEWER_ISSUER": self.daphnes[0],
            # One data folder and key set for the run: Django's settings are read once in this process.
            "REVIEWER_DATA_DIR": str(SCRATCH / "data"),
            "REVIEWER_SIGNING_KEY_DIR": str(SCRATCH / "keys"),
            # Each configuration's own: its database is new, so are the checkpoints kept outside it.
            "AUDIT_CHECKPOINT_DIR": str(self.work / "checkpoints"),
            "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
            "SECURE_SSL_REDIRECT": "false",  # plain http on loopback (a proxy terminates TLS in production)
            "SESSION_COOKIE_SECURE": "false",
            "CSRF_COOKIE_SECURE": "false",
            "LOG_LEVEL": "WARNING",
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
        from django.conf import settings

        if settings.configured:  # a configuration before this one: its connections go first
            from django.db import connections

            connections.close_all()
        with psycopg.connect(self.database.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{name}"')
        os.environ.update({k: v for k, v in self.env().items() if k not in ("PYTHONPATH",)})
        os.environ["DJANGO_SETTINGS_MODULE"] = "reviewer.settings"
        import django

        django.setup()
        from django.conf import settings
        from django.core.management import call_command

        settings.AUDIT_CHECKPOINT_DIR = self.work / "checkpoints"  # read once at setup: set per run
        call_command("migrate", verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)  # DEBUG is off: the pages need it
        from django_otp.plugins.otp_totp.models import TOTPDevice

        import signing_keys as keys
        from tests import factories

        call_command("rotate_signing_key", verbosity=0)  # DEBUG is off: the first key is made by hand
        keys.active_key()
        tenant = factories.make_tenant()
        factories.make_user("requester", tenant=tenant, principal_id="requester", groups=["sales"])
        people = []
        for n in range(max(args.reviewer_users, 1) + args.watchers * len(self.ports) + 1):
            user = factories.make_user(f"reviewer{n}", tenant=tenant, groups=["finance"])
            key = TOTPDevice.objects.get(user=user).key
            people.append({"username": user.username, "password": factories.PASSWORD, "key": key})
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
        agent = factories.make_agent(tenant, slug=AGENT, api_token=API_TOKEN, card_url="")
        seed = {
            "daphnes": self.daphnes,
            "issuer": self.daphnes[0],
            "audience": agent.audience,
            "tenant": tenant.slug,
            "jwks": keys.jwks(),
            "api_token": API_TOKEN,
            "reviewers": people[: args.reviewer_users],
            "watchers": people[args.reviewer_users : -1],
            "drainer": people[-1]["username"],
            "calls_file": str(self.work / "calls.txt"),
            "acts_file": str(self.work / "acts.txt"),
            "accepted_file": str(self.work / "accepted.txt"),
            "totp_file": str(self.work / "totp-steps.json"),
        }
        (self.work / "seed.json").write_text(json.dumps(seed))
        from django.db import connections

        connections.close_all()
        return seed

    def _spawn(self, name: str, command: list[str]) -> subprocess.Popen:
        log = open(self.work / "logs" / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        process = subprocess.Popen(  # noqa: S603 (our own interpreter and modules)
            command, cwd=ROOT, env=self.env(), stdout=log, stderr=subprocess.STDOUT
        )
        self.processes.append((name, process))
        return process

    def access_logs(self) -> list[Path]:
        return [self.work / "logs" / f"daphne{n}-access.log" for n in range(len(self.ports))]

    def start(self) -> None:
        import httpx

        python = sys.executable
        for n, port in enumerate(self.ports):
            self._spawn(
                f"daphne{n}",
                [python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
                + ["--access-log", str(self.access_logs()[n]), "reviewer.asgi:application"],
            )
        self._spawn("worker", [python, "manage.py", "run_worker"])
        for url in [f"{d}/.well-known/jwks.json" for d in self.daphnes]:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(url, timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                for name, process in self.processes:
                    if process.poll() is not None:
                        log = (self.work / "logs" / f"{name}.log").read_text()
                        raise RuntimeError(f"{name} exited: {log[-2000:]}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{url} did not answer within 60 s")
                time.sleep(0.2)  # waiting for a server to start listening

    def locust(self, rate: float, seconds: float, args, seed: dict, name: str = "") -> dict:
        tag = name.replace(" ", "-") or f"{rate:g}rps"
        prefix = self.out / f"locust-{tag}"
        env = {
            **self.env(),
            "LOAD_SEED": str(self.work / "seed.json"),
            "LOAD_RATE": str(rate),
            "LOAD_STAGE": tag,
            "LOAD_SECONDS": str(seconds),
            "LOAD_REVIEWER_USERS": str(args.reviewer_users),
            "LOAD_REVIEW_EVERY": str(args.review_every),
        }
        users = len(self.ports) + args.reviewer_users  # one agent user per Daphne (fixed counts)
        command = [sys.executable, "-m", "locust", "-f", str(ROOT / "bench" / "load" / "locustfile.py")]
        command += [
            "--headless",
            "-u",
            str(users),
            "-r",
            str(users),
            "--run-time",
            f"{math.ceil(seconds) + SLACK}s",
        ]
        command += ["--csv", str(prefix), "--only-summary", "--stop-timeout", "5", "--loglevel", "WARNING"]
        load = []
        started = time.monotonic()
        with open(self.work / "logs" / f"locust-{tag}.log", "wb") as log:
            process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)  # noqa: S603
            while process.poll() is None:
                load.append(os.getloadavg()[0])
                time.sleep(2)  # sampling the load average while locust runs
        # The agent users' schedule (one call every 1/rate seconds from the stage's start).
        offered = rate * seconds
        return {
            "name": name or f"{rate:g}/s",
            "rate": rate,
            "seconds": seconds,
            "wall_seconds": round(time.monotonic() - started, 1),
            "locust_exit": process.returncode,
            "offered": round(offered),
            "sent": checks.sent_calls(seed, tag),
            "load_avg_1m_max": max(load, default=0),
            "load_avg_1m_mean": round(sum(load) / len(load), 2) if load else 0,
            "endpoints": checks.read_stats(Path(f"{prefix}_stats.csv")),
            "failures": checks.read_failures(Path(f"{prefix}_failures.csv")),
        }

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


if __name__ == "__main__":
    sys.exit(main())
