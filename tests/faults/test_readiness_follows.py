"""/readyz follows real failures and recoveries of what it checks, with real processes: a Daphne whose
PostgreSQL crashes and comes back, and a worker whose audit sequencer cannot reach the database while
the worker itself ticks. (The worker stopped and started again, and Redis stopped and started again,
are in tests/e2e/test_deployment_tls.py, behind Caddy.)

Each test has the module's private PostgreSQL (tests/faults/servers.py), which it may crash; every
process binds 127.0.0.1 and is stopped by its PID.
"""

import httpx
import pytest

from tests import factories
from tests.examples.harness import free_port
from tests.reviewer_processes import (
    ServerProcess,
    answers,
    daphne,
    listening_socket,
    reviewer_env,
    start_all,
    url_of,
    worker,
)
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.database_independent]  # its own servers

BACKGROUND_LEFT_OUT = "exclude=worker&exclude=sequencer&exclude=outbox"  # as deploy/Caddyfile probes


def readiness(url: str, query: str = "") -> tuple[int, dict]:
    try:
        response = httpx.get(f"{url}/readyz" + (f"?{query}" if query else ""), timeout=15)
    except httpx.HTTPError as error:
        return 0, {"error": str(error)}
    return response.status_code, response.json()


def unready_naming(url: str, check: str, query: str = "") -> bool:
    return readiness(url, query) == (503, {"status": "unready", "failing": [check]})


def started_daphne(folder, env: dict) -> tuple[ServerProcess, str]:
    listener = listening_socket()
    url = url_of(listener)
    process = daphne("daphne", listener, env={**env, "REVIEWER_ISSUER": url}, log_dir=folder)
    process.ready = (lambda: answers(f"{url}/healthz"), "an answer to /healthz")
    start_all([process])
    listener.close()  # Daphne holds its own copy
    return process, url


def test_a_daphne_follows_its_postgresql_down_and_back(private_postgres, on_private_database, tmp_path):
    database = on_private_database()
    env = reviewer_env(
        url="http://127.0.0.1",
        database_url=database,
        data_dir=tmp_path / "data",
        DB_POOL_TIMEOUT="2",
        READY_CHECK_TIMEOUT_SECONDS="10",
    )
    process, url = started_daphne(tmp_path, env)
    try:
        wait_until(lambda: readiness(url, BACKGROUND_LEFT_OUT)[0] == 200, "ready", detail=process.log)

        private_postgres.crash()  # immediate shutdown: every pooled connection dies with it
        wait_until(
            lambda: unready_naming(url, "database", BACKGROUND_LEFT_OUT),
            "/readyz names the database",
            timeout=60,
            detail=process.log,
        )
        assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200  # alive: not restarted

        private_postgres.start()  # the same port and data, as a restarted server
        wait_until(
            lambda: readiness(url, BACKGROUND_LEFT_OUT)[0] == 200,
            "ready again, by the same process",
            timeout=60,
            detail=process.log,
        )
        assert process.process is not None and process.process.poll() is None  # the same process
    finally:
        process.stop()


def test_readyz_names_a_sequencer_that_falls_behind_while_the_worker_ticks_and_clears_when_it_catches_up(
    on_private_database, tmp_path, settings
):
    settings.AUDIT_SEQUENCING = "worker"  # as deployed on PostgreSQL: this process's events wait for it
    database = on_private_database()
    nowhere = f"postgres://postgres@127.0.0.1:{free_port()}/reviewer"  # nothing listens there
    base = reviewer_env(
        url="http://127.0.0.1",
        database_url=database,
        data_dir=tmp_path / "data",
        READY_SEQUENCER_LAG_MAX_SECONDS="1",
        READY_WORKER_TICK_MAX_SECONDS="30",
    )
    daphne_process, url = started_daphne(tmp_path, base)
    # The worker's audit sequencer connects with its own role's URL (AUDIT_SEQUENCER_DATABASE_URL):
    # unreachable, every pass fails, while the worker's jobs and its heartbeat go on.
    blocked = worker(
        "worker-blocked",
        env={**base, "AUDIT_SEQUENCER_DATABASE_URL": nowhere, "DB_POOL_TIMEOUT": "2"},
        log_dir=tmp_path,
        interval="0.2",
    )
    healthy: ServerProcess | None = None
    try:
        start_all([blocked])
        factories.make_agent(factories.make_tenant(), card_url="")  # a change and its audit events
        wait_until(
            lambda: unready_naming(url, "sequencer"),
            "/readyz names the sequencer (and not the worker, which ticks)",
            timeout=60,
            detail=lambda: f"{readiness(url)}\n{daphne_process.log()}{blocked.log()}",
        )

        blocked.stop()
        healthy = worker("worker-healthy", env=base, log_dir=tmp_path, interval="0.2")
        start_all([healthy])  # started means its sequencer caught up (approvals/worker/loop.py)
        wait_until(
            lambda: readiness(url)[0] == 200,
            "ready again once the events are chained",
            timeout=60,
            detail=lambda: daphne_process.log() + (healthy.log() if healthy else ""),
        )
    finally:
        for process in (healthy, blocked, daphne_process):
            if process is not None:
                process.stop()
