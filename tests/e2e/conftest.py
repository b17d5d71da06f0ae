"""Real servers on loopback for the end-to-end tests: Reviewer under Daphne, the delivery worker, and the
demo refund agent, each a subprocess stopped by its PID.

How the subprocesses share the test database. The test creates its data through the ORM, and the
subprocesses must see it, and the test must see what they write:
- tests here use `transactional_db`, so every write is committed (no test-wide transaction hides it);
- on PostgreSQL the subprocesses get DATABASE_URL naming pytest-django's test database;
- on SQLite pytest-django would make the test database in memory, where no other process can reach it.
  When e2e tests are selected, `pytest_collection_modifyitems` below gives it a file in a fresh
  temporary folder instead (before any database is created), unless SQLITE_TEST_NAME already did.
  Separate processes on one SQLite file lock properly (IMMEDIATE transactions, a busy timeout); threads
  on a shared-cache in-memory database would get "table is locked" instead.
Daphne gets an already listening socket (--fd), so its port is known without a race. The signing key
is made before anything starts and shared through REVIEWER_SIGNING_KEY_DIR, so every process signs
and publishes the same key.
"""

import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.test import override_settings

import signing_keys as keys
from examples.downstream import FakePaymentsServer
from tests.examples.harness import CHECKOUT_PYTHONPATH, AgentProcess, stop_process, stop_processes
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
READY_SECONDS = 30


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected what will not run
def pytest_collection_modifyitems(config, items):
    database = django_settings.DATABASES["default"]
    if database["ENGINE"] != "django.db.backends.sqlite3" or database.get("TEST", {}).get("NAME"):
        return
    if not any(item.get_closest_marker("e2e") for item in items):
        return
    folder = tempfile.mkdtemp(prefix="reviewer-e2e-db-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    database.setdefault("TEST", {})["NAME"] = str(Path(folder) / "test.sqlite3")


def database_url() -> str:
    """The URL of the database this test process uses now (the test database)."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        name = str(db["NAME"])
        if name == ":memory:" or "mode=memory" in name:
            pytest.fail("the e2e tests need a file-based SQLite test database (see tests/e2e/conftest.py)")
        return f"sqlite:///{name}"
    credentials = quote(db["USER"] or "", safe="")
    if db.get("PASSWORD"):
        credentials += ":" + quote(db["PASSWORD"], safe="")
    host = f"{credentials}@" if credentials else ""
    return f"postgres://{host}{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


class ServerProcess:
    """A subprocess with a log file, started in its own session and stopped by its PID."""

    def __init__(self, name: str, args: list[str], *, env: dict, log_dir: Path, pass_fds=()):
        self.name, self.args, self.env, self.pass_fds = name, args, env, pass_fds
        self.log_path = log_dir / f"{name}.log"
        self.process: subprocess.Popen | None = None

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

        def ready_while_running():
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.log()}")
            return ready()

        wait_until(
            ready_while_running, f"{self.name}: {what}", timeout=timeout, interval=0.1, detail=self.log
        )

    def stop(self) -> None:
        stop_process(self.process)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:] if self.log_path.exists() else ""


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


class Stack:
    """Reviewer (Daphne), its worker and the demo refund agent, all on loopback."""

    push_token = "e2e-push-token"

    def __init__(
        self,
        tmp_path: Path,
        *,
        downstream_url: str | None = None,
        with_agent: bool = True,
        worker_interval: str = "0.2",
    ):
        self.tmp_path = tmp_path
        self.downstream_url = downstream_url
        self.with_agent = with_agent  # False: Reviewer and its worker only (pull-path agents)
        self.worker_interval = worker_interval  # the safety-net poll; commits wake the worker anyway
        self.log_dir = tmp_path / "logs"
        self.log_dir.mkdir()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.access_log = self.log_dir / "reviewer-access.log"
        self.processes: list = []
        self.agent: AgentProcess | None = None

    @property
    def webhook(self) -> str:
        return f"{self.url}/a2a/push/refund-demo/"

    def env(self) -> dict:
        env = {
            **os.environ,
            "PYTHONPATH": CHECKOUT_PYTHONPATH,
            "PYTHONUNBUFFERED": "1",
            "DEBUG": "true",
            "DATABASE_URL": database_url(),
            "REVIEWER_ISSUER": self.url,
            "REVIEWER_DATA_DIR": str(self.tmp_path / "data"),
            "REVIEWER_SIGNING_KEY_DIR": str(django_settings.SIGNING_KEY_DIR),
            "LOG_LEVEL": "INFO",
            # The refund agent listens on loopback: allowed explicitly, as the demo does.
            "AGENT_ALLOWED_NETWORKS": "127.0.0.0/8,::1/128",
        }
        for name in ("REVIEWER_SIGNING_KEY", "REVIEWER_SIGNING_KEY_FILE", "SECRET_KEY", "SECRET_KEY_FILE"):
            env.pop(name, None)
        return env

    def start(self) -> "Stack":
        """Start Daphne, the worker and the agent side by side, then wait for each: none needs another
        to start (the worker reads only the database; the agent fetches Reviewer's keys when it first
        verifies a decision, and Daphne's socket already listens)."""
        keys.active_key()  # made here, once, before two processes could each make their own
        env = self.env()
        python = sys.executable
        fd = self.listener.fileno()
        reviewer = ServerProcess(
            "reviewer",
            [
                python,
                "-m",
                "daphne",
                "--fd",
                str(fd),
                "--access-log",
                str(self.access_log),
                "reviewer.asgi:application",
            ],
            env=env,
            log_dir=self.log_dir,
            pass_fds=(fd,),
        ).start()
        self.processes.append(reviewer)
        worker = ServerProcess(
            "worker",
            [python, "manage.py", "run_worker", "--interval", self.worker_interval],
            env=env,
            log_dir=self.log_dir,
        ).start()
        self.processes.append(worker)
        if self.with_agent:
            self.agent = AgentProcess(
                state_dir=self.tmp_path / "refund-agent",
                reviewer_url=self.url,
                downstream_url=self.downstream_url,
                port=self.agent.port if self.agent else None,
            ).launch()
        reviewer.wait_until(
            lambda: _answers(f"{self.url}/.well-known/jwks.json"), "an answer to /.well-known/jwks.json"
        )
        worker.wait_until(lambda: "worker started" in worker.log(), "'worker started'")
        if self.agent is not None:
            self.agent.wait_ready()
        return self

    def stop_processes(self) -> None:
        """Stop the agent, the worker and Reviewer together (each by its PID)."""
        agent = [self.agent.process] if self.agent is not None else []
        stop_processes(agent + [process.process for process in reversed(self.processes)])

    def restart(self) -> "Stack":
        """Stop Reviewer, the worker and the agent, then start them again: same database, same listening
        socket, same agent port and state folder (what a deploy or a crash does)."""
        self.stop_processes()
        self.processes = []
        return self.start()

    def stop(self) -> None:
        self.stop_processes()
        self.listener.close()

    def logs(self) -> str:
        parts = [f"--- {p.name}\n{p.log()}" for p in self.processes]
        if self.agent is not None:
            parts.append(f"--- refund agent\n{self.agent.log()[-5000:]}")
        return "\n".join(parts)


@pytest.fixture
def payments():
    """The fake payments service the agent refunds through: records idempotency keys, can drop a reply."""
    server = FakePaymentsServer().start()
    try:
        yield server
    finally:
        server.stop()


def _running(stack: Stack):
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()
        sys.stdout.write(stack.logs())  # shown by pytest only for a failing test


@pytest.fixture
def stack(transactional_db, tmp_path):
    """Reviewer, its worker and the refund agent (ledger file), running; logs printed when a test fails."""
    yield from _running(Stack(tmp_path))


@pytest.fixture(scope="module")
def module_reviewer_stack(django_db_setup, django_db_blocker, tmp_path_factory):
    """Reviewer and its worker, started once for a test module. They keep nothing between tests that
    the database does not hold (each test's flush empties it under them, as between the browser tests
    and their one Daphne), and the agents of these tests are processes of each test."""
    stack = Stack(tmp_path_factory.mktemp("reviewer-stack"), with_agent=False)
    # Module fixtures run before the function-scoped settings of tests/conftest.py: the same key
    # folder as theirs, so this process and the servers sign with one key.
    key_settings = override_settings(
        SIGNING_KEY_DIR=tmp_path_factory.getbasetemp() / "signing-keys",
        SIGNING_KEY_PEM="",
        SIGNING_KEY_AUTOGENERATE=True,
    )
    try:
        with django_db_blocker.unblock(), key_settings:
            stack.start()
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def reviewer_stack(transactional_db, module_reviewer_stack):
    """Reviewer and its worker only, for agents that pull their decisions (MCP, LangGraph, REST...);
    shared by the tests of a module (see module_reviewer_stack). Logs printed when a test fails."""
    yield module_reviewer_stack
    sys.stdout.write(module_reviewer_stack.logs())  # shown by pytest only for a failing test


@pytest.fixture
def paying_stack(transactional_db, tmp_path, payments):
    """The same stack, with the agent refunding through the fake payments service."""
    yield from _running(Stack(tmp_path, downstream_url=payments.url))


@pytest.fixture
def workers(transactional_db, tmp_path, settings):
    """Start n `manage.py run_worker` processes on the test database, polling every `interval` seconds
    (by default far longer than any test waits, so what they deliver in time was woken, not polled);
    each has finished its first tick and listens for wake-ups when this returns. This process shares
    their data folder (the doorbells on SQLite)."""
    stack = Stack(tmp_path)
    settings.DATA_DIR = stack.tmp_path / "data"
    processes = []

    def start(n: int = 1, *, interval: str = "600") -> list[ServerProcess]:
        for number in range(n):
            process = ServerProcess(
                f"worker-{number}",
                [sys.executable, "manage.py", "run_worker", "--interval", interval],
                env=stack.env(),
                log_dir=stack.log_dir,
            ).start()
            processes.append(process)
        for process in processes:
            process.wait_until(lambda p=process: "worker started" in p.log(), "'worker started'")
        return processes

    try:
        yield start
    finally:
        stop_processes([process.process for process in processes])
        stack.listener.close()
        sys.stdout.write("\n".join(f"--- {p.name}\n{p.log()}" for p in processes))  # shown on failure
