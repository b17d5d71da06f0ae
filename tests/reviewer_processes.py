"""Reviewer's own processes as subprocesses of a test: Daphne (on a socket this process listens on) and
the delivery worker, each with a log file, started in its own session and stopped by its PID. The e2e
stack (tests/e2e/conftest.py), the fault stack (tests/faults/stack.py) and the fan-out test start them
from here.

Starting is split from waiting: a stack launches all its processes first and then waits for each, so
their start-ups (a Django import and checks each, a few seconds) overlap instead of adding up. A wait
polls for the process's own sign of life (Daphne answers /.well-known/jwks.json; the worker logs "worker
started") and stops at once, with the log, if the process exited.
"""

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
from django.conf import settings as django_settings

from tests.examples.harness import CHECKOUT_PYTHONPATH, stop_process
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[1]
# How long a started process may take to show its sign of life. The worker says "worker started" only
# once its sequencer caught up and its expiry and delivery jobs each ran once (approvals/worker/jobs.py),
# which, with the suite's other process and a browser on this 2-core machine, took over 30 s once.
READY_SECONDS = 60


class ServerProcess:
    """A subprocess with a log file, started in its own session and stopped by its PID."""

    def __init__(self, name: str, args: list[str], *, env: dict, log_dir: Path, pass_fds=()):
        self.name, self.args, self.env, self.pass_fds = name, args, env, pass_fds
        self.log_path = log_dir / f"{name}.log"
        self.process: subprocess.Popen | None = None
        # Set by the helpers below: what `wait_ready` polls for, and its name.
        self.ready: tuple[Callable[[], bool], str] | None = None

    def start(self) -> "ServerProcess":
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.args,
                cwd=REPO,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=self.pass_fds,
                start_new_session=True,
            )
        return self

    def wait_until(self, ready, what: str, timeout: float = READY_SECONDS) -> None:
        """Wait for `ready()` while the process runs; stop at once, with its log, if it exited."""
        process = self.process
        assert process is not None, f"{self.name}: start() first"

        def ready_while_running():
            if process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {process.returncode}:\n{self.log()}")
            return ready()

        wait_until(
            ready_while_running, f"{self.name}: {what}", timeout=timeout, interval=0.1, detail=self.log
        )

    def wait_ready(self) -> "ServerProcess":
        """Wait for the sign of life its helper named (daphne(): JWKS answers; worker(): its log line)."""
        assert self.ready is not None, f"{self.name}: no sign of life named"
        ready, what = self.ready
        self.wait_until(ready, what)
        return self

    def stop(self) -> None:
        stop_process(self.process)

    def log(self) -> str:
        """The log's last 5000 characters: what a failure report shows."""
        return self.whole_log()[-5000:]

    def whole_log(self) -> str:
        """The whole log: what a sign of life is looked for in. A worker that prints mail right after
        "worker started" pushes the line out of the tail between two polls."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def logged(self, line: str) -> bool:
        return line in self.whole_log()


def answers(url: str) -> bool:
    """True when a GET of `url` answers 200 now."""
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def listening_socket(backlog: int = 64) -> socket.socket:
    """A loopback socket listening on a free port, for Daphne's --fd: its URL is known before Daphne
    starts, and a client's connection waits in the backlog while Daphne is down."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(backlog)
    return listener


def url_of(listener: socket.socket) -> str:
    return f"http://127.0.0.1:{listener.getsockname()[1]}"


def reviewer_env(*, url: str, database_url: str, data_dir: Path, **extra: str) -> dict:
    """The environment of a Reviewer process of the tests: this checkout, DEBUG, the given database, the
    issuer `url`, this process's signing-key folder (every process signs with one key) and loopback
    agents allowed; `extra` adds or overrides variables. Keys and secrets of the developer's shell are
    dropped."""
    env = {
        **os.environ,
        "PYTHONPATH": CHECKOUT_PYTHONPATH,
        "PYTHONUNBUFFERED": "1",
        "DEBUG": "true",
        "DATABASE_URL": database_url,
        "REVIEWER_ISSUER": url,
        "REVIEWER_DATA_DIR": str(data_dir),
        "REVIEWER_SIGNING_KEY_DIR": str(django_settings.SIGNING_KEY_DIR),
        "LOG_LEVEL": "INFO",
        # The refund agent listens on loopback: allowed explicitly, as the demo does.
        "AGENT_ALLOWED_NETWORKS": "127.0.0.0/8,::1/128",
        **extra,
    }
    for name in ("REVIEWER_SIGNING_KEY", "REVIEWER_SIGNING_KEY_FILE", "SECRET_KEY", "SECRET_KEY_FILE"):
        env.pop(name, None)
    return env


REVIEWER_APP = "reviewer.asgi:application"
# The same app with its static files served, for tests whose pages run in Chromium (htmx, the scripts).
REVIEWER_APP_WITH_STATIC_FILES = "tests.browser.asgi:application"


def daphne(
    name: str,
    listener: socket.socket,
    *,
    env: dict,
    log_dir: Path,
    access_log: Path | None = None,
    app: str = REVIEWER_APP,
) -> ServerProcess:
    """Daphne serving `app` (reviewer.asgi) on `listener` (--fd), not started yet."""
    fd = listener.fileno()
    args = [sys.executable, "-m", "daphne", "--fd", str(fd)]
    if access_log is not None:
        args += ["--access-log", str(access_log)]
    process = ServerProcess(name, [*args, app], env=env, log_dir=log_dir, pass_fds=(fd,))
    jwks = f"{url_of(listener)}/.well-known/jwks.json"
    process.ready = (lambda: answers(jwks), "an answer to /.well-known/jwks.json")
    return process


def worker(name: str, *, env: dict, log_dir: Path, interval: str) -> ServerProcess:
    """`manage.py run_worker --interval <interval>`, not started yet."""
    process = ServerProcess(
        name,
        [sys.executable, "manage.py", "run_worker", "--interval", interval],
        env=env,
        log_dir=log_dir,
    )
    process.ready = (lambda: process.logged("worker started"), "'worker started'")
    return process


def start_all(processes: list[ServerProcess]) -> list[ServerProcess]:
    """Start every process, then wait for each: their start-ups overlap."""
    for process in processes:
        process.start()
    for process in processes:
        process.wait_ready()
    return processes
