"""Reviewer behind PgBouncer in transaction mode (Debian's `pgbouncer`, started here on loopback in front
of the suite's PostgreSQL), with its LISTEN connections direct (`DATABASE_LISTEN_URL`).

PgBouncer in transaction mode hands a server connection back to its pool after each transaction, so a
LISTEN through it is lost (lib/storage/pg_listen.py): the workers would fall back to polling. Here
every query of Daphne and the worker goes through PgBouncer, only the listeners go direct, and the
worker polls every 600 s: a delivery and a chained trail within the deadline were woken by NOTIFY
through PgBouncer and heard on the direct connections. (The same run without DATABASE_LISTEN_URL misses
the delivery's deadline: the wake-up is lost, as the docs say.)"""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from django.db import connection

from approvals.a2a.client import forget_cards
from approvals.models import OutboxMessage, Proposal
from audit.chain.verification import verify_chain
from audit.models import AuditPending
from tests import factories
from tests.approvals.fake_agent import FakeAgent
from tests.e2e.conftest import Stack, database_url
from tests.e2e.test_a2a_loop import decide_in_browser
from tests.examples.harness import free_port, stop_processes
from tests.reviewer_processes import daphne, start_all, worker
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
DEADLINE = 20  # far below the workers' 600 s poll


class PgBouncer:
    """pgbouncer in transaction mode on a free loopback port, in front of the suite's PostgreSQL."""

    def __init__(self, folder: Path, upstream: str):
        self.folder = folder
        self.upstream = urlsplit(upstream)
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    def url(self) -> str:
        host = f"{self.upstream.username}@127.0.0.1:{self.port}"
        return urlunsplit(self.upstream._replace(netloc=host))

    def start(self) -> "PgBouncer":
        self.folder.mkdir(parents=True, exist_ok=True)
        users = self.folder / "users.txt"
        users.write_text(f'"{self.upstream.username}" ""\n')
        ini = self.folder / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"* = host={self.upstream.hostname} port={self.upstream.port or 5432}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {users}\n"
            "pool_mode = transaction\ndefault_pool_size = 10\nmax_client_conn = 500\n"
            f"logfile = {self.folder / 'pgbouncer.log'}\n"
        )
        # pgbouncer will not run as root: as the postgres account then (setpriv execs, the PID is its own).
        prefix = (
            ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"]
            if os.geteuid() == 0
            else []
        )
        if prefix:
            shutil.chown(self.folder, "postgres", "postgres")
            for path in (users, ini):
                shutil.chown(path, "postgres", "postgres")
        self.process = subprocess.Popen([*prefix, PGBOUNCER, str(ini)], start_new_session=True)
        wait_until(
            self._accepts, "pgbouncer to accept connections", timeout=20, interval=0.1, detail=self.log
        )
        return self

    def _accepts(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"pgbouncer exited with {self.process.returncode}:\n{self.log()}")
        try:
            with psycopg.connect(self.url(), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def stop(self) -> None:
        stop_processes([self.process] if self.process else [])

    def log(self) -> str:
        path = self.folder / "pgbouncer.log"
        return path.read_text(errors="replace")[-5000:] if path.exists() else ""


@pytest.fixture
def pgbouncer(transactional_db):
    if connection.vendor != "postgresql":
        pytest.skip("PgBouncer fronts PostgreSQL")
    # A folder the postgres account can enter (pytest's tmp_path is private to the test's user).
    folder = Path(tempfile.mkdtemp(prefix="reviewer-pgbouncer-"))
    os.chmod(folder, 0o755)  # noqa: S103 (read and enter only)
    bouncer = PgBouncer(folder / "pgbouncer", database_url()).start()
    try:
        yield bouncer
    finally:
        bouncer.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def a2a_agent(settings):
    settings.AGENT_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    agent = FakeAgent().start()
    forget_cards()
    try:
        yield agent
    finally:
        agent.stop()


def test_behind_pgbouncer_in_transaction_mode_the_worker_is_woken_through_the_direct_listen(
    pgbouncer, a2a_agent, tmp_path
):
    tenant = factories.make_tenant()
    factories.make_user("requester", tenant=tenant, principal_id="requester", groups=["finance"])
    reviewer = factories.make_user("reviewer_a", tenant=tenant, groups=["finance"])
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 1}]
    )
    agent = factories.make_agent(tenant, card_url=a2a_agent.card_url)
    stack = Stack(tmp_path)
    env = {
        **stack.env(),
        "DATABASE_URL": pgbouncer.url(),  # every query through PgBouncer
        "DATABASE_LISTEN_URL": database_url(),  # the listeners direct
        "OUTBOX_DIRECT_SEND": "false",  # the decision leaves only when the worker is woken
        "AUDIT_SEQUENCING": "worker",  # and the trail is chained only when its sequencer is
    }
    processes = [
        daphne("reviewer", stack.listener, env=env, log_dir=stack.log_dir),
        worker("worker", env=env, log_dir=stack.log_dir, interval="600"),
    ]
    try:
        start_all(processes)
        logs = lambda: "\n".join(f"--- {p.name}\n{p.log()}" for p in processes) + pgbouncer.log()  # noqa: E731
        task_id, context_id = a2a_agent.open_task()
        proposal = factories.submit(agent, task_id=task_id, context_id=context_id)

        decide_in_browser(stack, reviewer, proposal, "approve")  # sign-in, page and vote through PgBouncer

        wait_until(
            lambda: OutboxMessage.objects.filter(
                proposal=proposal, status=OutboxMessage.Status.DELIVERED
            ).exists(),
            "the approval delivered by the woken worker",
            timeout=DEADLINE,
            detail=logs,
        )
        wait_until(
            lambda: not AuditPending.objects.exists(),
            "the trail chained by the woken sequencer",
            timeout=DEADLINE,
            detail=logs,
        )
        assert len(a2a_agent.decisions_received()) == 1
        assert Proposal.objects.get(pk=proposal.pk).state == "approved"
        assert verify_chain(f"tenant:{tenant.id}").ok
    finally:
        stop_processes([p.process for p in processes if p.process])
        stack.listener.close()
