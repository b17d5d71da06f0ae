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
import itertools
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.test import override_settings

import signing_keys as keys
from examples.downstream import FakePaymentsServer
from tests.examples.harness import AgentProcess, stop_processes
from tests.reviewer_processes import (
    REVIEWER_APP,
    ServerProcess,
    daphne,
    listening_socket,
    reviewer_env,
    start_all,
    url_of,
    worker,
)


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
        app: str = REVIEWER_APP,
    ):
        self.tmp_path = tmp_path
        self.app = app  # what Daphne serves
        self.downstream_url = downstream_url
        self.with_agent = with_agent  # False: Reviewer and its worker only (pull-path agents)
        self.worker_interval = worker_interval  # the safety-net poll; commits wake the worker anyway
        self.log_dir = tmp_path / "logs"
        self.log_dir.mkdir()
        self.listener = listening_socket()
        self.url = url_of(self.listener)
        self.access_log = self.log_dir / "reviewer-access.log"
        self.processes: list[ServerProcess] = []
        self.agent: AgentProcess | None = None
        self._starts = itertools.count(1)

    @property
    def webhook(self) -> str:
        return f"{self.url}/a2a/push/refund-demo/"

    def env(self) -> dict:
        return reviewer_env(url=self.url, database_url=database_url(), data_dir=self.tmp_path / "data")

    def start(self) -> "Stack":
        """Start Daphne, the worker and the agent side by side, then wait for each: none needs another
        to start (the worker reads only the database; the agent fetches Reviewer's keys when it first
        verifies a decision, and Daphne's socket already listens)."""
        keys.active_key()  # made here, once, before two processes could each make their own
        env = self.env()
        start = next(self._starts)
        suffix = f"-{start}" if start > 1 else ""  # a new log per start: no earlier "worker started"
        self.processes = [
            daphne(
                f"reviewer{suffix}",
                self.listener,
                env=env,
                log_dir=self.log_dir,
                access_log=self.access_log,
                app=self.app,
            ),
            worker(f"worker{suffix}", env=env, log_dir=self.log_dir, interval=self.worker_interval),
        ]
        for process in self.processes:
            process.start()
        if self.with_agent:
            self.agent = AgentProcess(
                state_dir=self.agent.state_dir if self.agent else self.tmp_path / "refund-agent",
                reviewer_url=self.url,
                downstream_url=self.downstream_url,
                port=self.agent.port if self.agent else None,
            ).launch()
        for process in self.processes:
            process.wait_ready()
        if self.agent is not None:
            self.agent.wait_ready()
        return self

    def running(self) -> bool:
        return bool(self.processes) and all(
            p.process is not None and p.process.poll() is None for p in self.processes
        )

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

    @contextmanager
    def refund_agent(self, state_dir: Path, *, downstream_url: str | None = None):
        """The demo refund agent of one test on this running Reviewer (shared by a module's tests): its
        own port, state folder (ledger) and downstream; the access log starts empty, so what a test
        reads there is what happened during it. Stopped afterwards; Reviewer keeps running."""
        if not self.running():  # an earlier test's failure took it down: a fresh start, not its leftovers
            self.restart()
        self.access_log.write_text("")  # Daphne appends (mode "a"): its next line lands at the start
        self.with_agent, self.downstream_url = True, downstream_url
        self.agent = AgentProcess(state_dir=state_dir, reviewer_url=self.url, downstream_url=downstream_url)
        try:
            self.agent.start()
            yield self
        finally:
            self.agent.stop()
            self.with_agent, self.downstream_url = False, None

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


def shared_signing_keys(tmp_path_factory):
    """Module fixtures run before the function-scoped settings of tests/conftest.py: the same key folder
    as theirs, so this process and the servers a module starts sign with one key."""
    return override_settings(
        SIGNING_KEY_DIR=tmp_path_factory.getbasetemp() / "signing-keys",
        SIGNING_KEY_PEM="",
        SIGNING_KEY_AUTOGENERATE=True,
    )


@pytest.fixture(scope="module")
def module_reviewer_stack(request, django_db_setup, django_db_blocker, tmp_path_factory):
    """Reviewer and its worker, started once for a test module. They keep nothing between tests that
    the database does not hold (each test's flush empties it under them, as between the browser tests
    and their one Daphne); each test brings its own agent (`stack`, `paying_stack`) or runs its agents
    as processes of its own (`reviewer_stack`). Daphne serves the module's REVIEWER_APP when it names
    one (tests.reviewer_processes.REVIEWER_APP_WITH_STATIC_FILES for pages opened in Chromium)."""
    app = getattr(request.module, "REVIEWER_APP", REVIEWER_APP)
    stack = Stack(tmp_path_factory.mktemp("reviewer-stack"), with_agent=False, app=app)
    try:
        with django_db_blocker.unblock(), shared_signing_keys(tmp_path_factory):
            stack.start()
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def stack(transactional_db, tmp_path, module_reviewer_stack):
    """Reviewer and its worker (shared by the module's tests, see module_reviewer_stack) and this test's
    refund agent (its own ledger file), running; logs printed when a test fails."""
    with module_reviewer_stack.refund_agent(tmp_path / "refund-agent") as running:
        yield running
        sys.stdout.write(running.logs())  # shown by pytest only for a failing test


@pytest.fixture
def paying_stack(transactional_db, tmp_path, payments, module_reviewer_stack):
    """The same stack, with the agent refunding through the fake payments service."""
    with module_reviewer_stack.refund_agent(
        tmp_path / "refund-agent", downstream_url=payments.url
    ) as running:
        yield running
        sys.stdout.write(running.logs())  # shown by pytest only for a failing test


@pytest.fixture
def reviewer_stack(transactional_db, module_reviewer_stack):
    """Reviewer and its worker only, for agents that pull their decisions (MCP, LangGraph, REST...);
    shared by the tests of a module (see module_reviewer_stack). Logs printed when a test fails."""
    if not module_reviewer_stack.running():  # an earlier test's failure took it down
        module_reviewer_stack.restart()
    yield module_reviewer_stack
    sys.stdout.write(module_reviewer_stack.logs())  # shown by pytest only for a failing test


@pytest.fixture
def workers(transactional_db, tmp_path, settings):
    """Start n `manage.py run_worker` processes on the test database, polling every `interval` seconds
    (by default far longer than any test waits, so what they deliver in time was woken, not polled);
    each has finished its first tick and listens for wake-ups when this returns. This process shares
    their data folder (the doorbells on SQLite)."""
    stack = Stack(tmp_path)
    settings.DATA_DIR = stack.tmp_path / "data"
    processes: list[ServerProcess] = []

    def start(n: int = 1, *, interval: str = "600", env: dict | None = None) -> list[ServerProcess]:
        """`env` adds to (or overrides) the workers' environment."""
        started = [
            worker(
                f"worker-{len(processes) + number}",
                env={**stack.env(), **(env or {})},
                log_dir=stack.log_dir,
                interval=interval,
            )
            for number in range(n)
        ]
        processes.extend(started)
        start_all(started)  # side by side
        return processes

    try:
        yield start
    finally:
        stop_processes([process.process for process in processes])
        stack.listener.close()
        sys.stdout.write("\n".join(f"--- {p.name}\n{p.log()}" for p in processes))  # shown on failure
