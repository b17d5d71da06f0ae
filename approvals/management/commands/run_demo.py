"""`manage.py run_demo` (what `make demo` runs): the whole product on loopback with nothing but the venv.

migrate → seed_demo → Daphne (Reviewer, :8000), the delivery worker and the demo refund agent (:8001)
as child processes → wait until each answers → the demo client sends three refund requests with
Reviewer's push webhook → print where to sign in. Ctrl-C (or SIGTERM) stops every child by its PID:
terminate, wait, then kill. Everything the demo writes (the SQLite database, keys, child logs in
demo/logs/, the agent's ledger, the demo client's count) goes under REVIEWER_DATA_DIR (default data/).
"""

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from approvals.management.commands import seed_demo
from lib.tokens import new_token

READY_TIMEOUT_SECONDS = 30


class Child:
    """One child process, its log file, and how to tell it is ready."""

    def __init__(
        self,
        name: str,
        args: list[str],
        *,
        log_dir: Path,
        env: dict,
        ready_url: str | None = None,
        ready_line: str | None = None,
    ):
        self.name, self.args, self.env = name, args, env
        self.ready_url, self.ready_line = ready_url, ready_line
        self.log_path = log_dir / f"{name}.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> subprocess.Popen:
        with self.log_path.open("ab") as log:
            # A session of its own: the terminal's Ctrl-C reaches run_demo only, which stops the
            # children in order instead of all of them dying at once.
            self.process = subprocess.Popen(  # noqa: S603 (our own interpreter and modules, no shell)
                self.args,
                cwd=settings.BASE_DIR,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self.process

    def is_ready(self) -> bool:
        if self.ready_url:
            try:
                return httpx.get(self.ready_url, timeout=1).status_code == 200
            except httpx.HTTPError:
                return False
        return self.ready_line is None or self.ready_line in self.log_tail()

    def exited(self) -> bool:
        return self.process is not None and self.process.poll() is not None

    def log_tail(self, lines: int = 20) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def refund_agent_command(python: str, port: int, reviewer_url: str, api_token: str, state_dir: Path) -> list:
    """The demo refund agent's command line. Its slug is named in each request it parks, so the worker's
    ListTasks sweep adopts the agent's parked tasks instead of warning about every one of them."""
    return [
        python,
        "-m",
        "examples.refund_agent",
        "--port",
        str(port),
        "--reviewer-url",
        reviewer_url,
        "--api-token",
        api_token,
        "--agent-slug",
        seed_demo.AGENT_SLUG,
        "--tenant",
        seed_demo.TENANT,
        "--state-dir",
        str(state_dir),
    ]


def data_dir_prefix() -> str:
    """What a command run from another terminal needs to read this demo's database: its REVIEWER_DATA_DIR
    when the demo runs on one ("" on the default data/)."""
    given = os.environ.get("REVIEWER_DATA_DIR")
    return f"REVIEWER_DATA_DIR={shlex.quote(given)} " if given else ""


def demo_client_state_file(demo_dir: Path) -> Path:
    """Where the demo client counts the requests it sent: beside the demo's database (REVIEWER_DATA_DIR),
    so a demo on a fresh data folder starts with the sample refunds, whatever another folder counted."""
    return demo_dir / "demo-client.sent"


class Command(BaseCommand):
    help = "Run Reviewer, its worker, the demo refund agent and three demo requests; Ctrl-C stops them all."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000, help="Reviewer's port (default 8000)")
        parser.add_argument(
            "--agent-port", type=int, default=8001, help="the refund agent's port (default 8001)"
        )
        parser.add_argument("--requests", type=int, default=3, help="demo requests to send (0: none)")

    def handle(self, *args, port, agent_port, requests, **options):
        reviewer_url, agent_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{agent_port}"
        demo_dir = Path(settings.DATA_DIR) / "demo"
        log_dir = demo_dir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)

        self.stdout.write("Preparing the database (migrate, seed_demo) ...")
        call_command("migrate", interactive=False, verbosity=0)
        push_token, api_token = new_token(), new_token()
        call_command("seed_demo", agent_url=agent_url, push_token=push_token, api_token=api_token)

        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.setdefault("REVIEWER_ISSUER", reviewer_url)
        # The demo agent runs on loopback, which outbound calls refuse unless an operator allows it.
        env.setdefault("AGENT_ALLOWED_NETWORKS", "127.0.0.0/8,::1/128")
        python = sys.executable
        children = [
            Child(
                "reviewer",
                [python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "reviewer.asgi:application"],
                log_dir=log_dir,
                env=env,
                ready_url=f"{reviewer_url}/.well-known/jwks.json",
            ),
            Child(
                "worker",
                [python, "manage.py", "run_worker", "--interval", "1"],
                log_dir=log_dir,
                env=env,
                ready_line="worker started",
            ),
            Child(
                "refund-agent",
                refund_agent_command(python, agent_port, reviewer_url, api_token, demo_dir / "refund-agent"),
                log_dir=log_dir,
                env=env,
                ready_url=f"{agent_url}/.well-known/agent-card.json",
            ),
        ]

        stop = threading.Event()
        previous = {
            sig: signal.signal(sig, lambda signum, frame: stop.set())
            for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            for child in children:
                process = child.start()
                self.stdout.write(f"started {child.name} (pid {process.pid}), log {child.log_path}")
            self._wait_ready(children, stop)
            if requests and not stop.is_set():
                self._send_demo_requests(agent_url, reviewer_url, push_token, requests, demo_dir, env)
            self._print_welcome(reviewer_url, log_dir)
            self._print_send_more(agent_url, reviewer_url, push_token, demo_dir)
            while not stop.wait(1):
                crashed = [child for child in children if child.exited()]
                if crashed:
                    raise CommandError(self._crash_report(crashed))
        finally:
            self.stdout.write("Stopping ...")
            for child in reversed(children):
                child.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.stdout.write("Stopped.")

    def _wait_ready(self, children: list[Child], stop: threading.Event) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        waiting = list(children)
        while waiting and not stop.is_set():
            crashed = [child for child in children if child.exited()]
            if crashed:
                raise CommandError(self._crash_report(crashed))
            for child in [child for child in waiting if child.is_ready()]:
                self.stdout.write(f"{child.name} is ready")
                waiting.remove(child)
            if time.monotonic() > deadline:
                raise CommandError(
                    f"not ready after {READY_TIMEOUT_SECONDS}s: " + self._crash_report(waiting)
                )
            stop.wait(0.2)  # readiness poll, bounded by the deadline

    def _send_demo_requests(self, agent_url, reviewer_url, push_token, count, demo_dir, env) -> None:
        self.stdout.write(f"Sending {count} demo refund requests to the agent ...")
        log_dir = demo_dir / "logs"
        client = subprocess.run(  # noqa: S603 (our own interpreter and modules, no shell)
            [
                sys.executable,
                "-m",
                "examples.demo_client",
                "--agent-url",
                agent_url,
                "--webhook",
                f"{reviewer_url}/a2a/push/{seed_demo.AGENT_SLUG}/",
                "--push-token",
                push_token,
                "--count",
                str(count),
                "--state-file",
                str(demo_client_state_file(demo_dir)),
            ],
            cwd=settings.BASE_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        (log_dir / "demo-client.log").write_text(client.stdout + client.stderr)
        self.stdout.write(client.stdout.rstrip())
        if client.returncode != 0:
            self.stderr.write(
                f"the demo client exited with {client.returncode}; see {log_dir / 'demo-client.log'}"
            )

    def _print_send_more(self, agent_url, reviewer_url, push_token, demo_dir) -> None:
        """How to send more requests while the demo runs (new orders each time; the push token is this
        run's, on loopback only)."""
        self.stdout.write(
            "More refund requests (new orders each time), from another terminal:\n"
            f"  {sys.executable} -m examples.demo_client --agent-url {agent_url} "
            f"--webhook {reviewer_url}/a2a/push/{seed_demo.AGENT_SLUG}/ --push-token {push_token} --count 3 "
            f"--state-file {demo_client_state_file(demo_dir)}"
        )

    def _print_welcome(self, reviewer_url, log_dir) -> None:
        self.stdout.write(
            self.style.SUCCESS(
                f"\nReviewer is running: {reviewer_url}/  (sign in at {reviewer_url}/accounts/login/)\n"
                "Sign in as reviewer1 or reviewer2 with the password printed above and the code from\n"
                f"  {data_dir_prefix()}{sys.executable} manage.py totp_code reviewer1 reviewer2\n"
                f"Admin: {reviewer_url}/admin/ as demo-admin. Logs: {log_dir}/\n"
                "Ctrl-C stops everything."
            )
        )

    @staticmethod
    def _crash_report(children: list[Child]) -> str:
        return "\n".join(
            f"{child.name} (exit "
            f"{child.process.returncode if child.process and child.exited() else 'running'}), "
            f"last lines of {child.log_path}:\n{child.log_tail()}"
            for child in children
        )
