"""The readiness checks one by one (health/checks.py), the worker's heartbeat, `manage.py worker_health`
and the gauges on /metrics."""

import os
import socket
import threading
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from approvals.worker.loop import Worker
from health import checks, heartbeats
from health.models import WorkerHeartbeat
from tests import factories
from tests.examples.harness import free_port

pytestmark = pytest.mark.django_db

BACKGROUND_ONLY = ("worker", "sequencer", "outbox")


def failing(names, now=None) -> list[str]:
    return checks.Readiness(checks.run_sync_checks(names, now)).failing


def test_a_worker_tick_records_this_process_heartbeat():
    Worker().tick()
    beat = WorkerHeartbeat.objects.get()
    assert (beat.host, beat.pid) == (socket.gethostname(), os.getpid())
    first = beat.ticked_at
    Worker().tick()
    assert WorkerHeartbeat.objects.get().ticked_at > first  # one row per process, moved forward


def test_the_worker_check_fails_once_the_newest_tick_is_older_than_the_limit(settings):
    settings.READY_WORKER_TICK_MAX_SECONDS = 30
    heartbeats.record_tick()
    assert failing(BACKGROUND_ONLY) == []
    assert failing(BACKGROUND_ONLY, now=timezone.now() + timedelta(seconds=31)) == ["worker"]


def test_the_sequencer_check_fails_when_an_event_waited_too_long_to_be_chained(settings, agent):
    settings.AUDIT_SEQUENCING = "worker"  # nothing chains it in this process
    settings.READY_SEQUENCER_LAG_MAX_SECONDS = 30
    heartbeats.record_tick()
    factories.submit(agent)
    assert checks.sequencer_lag(timezone.now())[0] > 0
    soon, later = timezone.now() + timedelta(seconds=25), timezone.now() + timedelta(seconds=31)
    assert failing(("sequencer",), now=soon) == []
    assert failing(("sequencer",), now=later) == ["sequencer"]


def test_the_outbox_check_fails_on_too_many_due_messages_or_one_due_too_long(
    settings, agent, refund_policy, reviewer_a
):
    factories.approve(agent, reviewer_a)  # its continuation is due now (the worker sends it)
    assert checks.outbox_backlog(timezone.now())[0] == 1
    settings.READY_OUTBOX_BACKLOG_MAX, settings.READY_OUTBOX_DUE_MAX_SECONDS = 1, 300
    assert failing(("outbox",)) == []
    assert failing(("outbox",), now=timezone.now() + timedelta(seconds=301)) == ["outbox"]
    settings.READY_OUTBOX_BACKLOG_MAX = 0
    assert failing(("outbox",)) == ["outbox"]


def test_a_failing_database_is_named_alone_and_what_reads_it_is_not_run(monkeypatch):
    def refused():
        raise OSError("connection refused")

    monkeypatch.setattr(checks, "_database", refused)
    results = checks.run_sync_checks(("database", "migrations", "signing_key", "worker"))
    readiness = checks.Readiness(results)
    assert readiness.failing == ["database"]
    assert {r.name: r.details for r in results}["worker"] == {"skipped": "database"}
    assert readiness.body(with_details=False) == {"status": "unready", "failing": ["database"]}


def test_unapplied_migrations_fail_and_applied_ones_are_read_once_per_process(monkeypatch):
    monkeypatch.setattr(checks, "_migrations_applied", False)
    monkeypatch.setattr(MigrationExecutor, "migration_plan", lambda self, targets: [("a migration", False)])
    assert failing(("migrations",)) == ["migrations"]
    monkeypatch.undo()
    monkeypatch.setattr(checks, "_migrations_applied", False)
    assert failing(("migrations",)) == []
    monkeypatch.setattr(MigrationExecutor, "__init__", lambda *args: pytest.fail("read again"))
    assert failing(("migrations",)) == []


def test_an_unloadable_signing_key_fails(settings, tmp_path):
    settings.SIGNING_KEY_DIR, settings.SIGNING_KEY_AUTOGENERATE = tmp_path / "no-keys", False
    assert failing(("signing_key",)) == ["signing_key"]


def test_a_redis_that_does_not_answer_fails_the_redis_check(settings):
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": checks.REDIS_LAYER,
            "CONFIG": {"hosts": [{"address": f"redis://127.0.0.1:{free_port()}/0"}]},
        }
    }
    assert "redis" in checks.selected(set())
    readiness = async_to_sync(checks.readiness)(("redis",))
    assert readiness.failing == ["redis"]


def test_without_redis_there_is_no_redis_check(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    assert "redis" not in checks.selected(set())


def test_worker_health_exits_1_without_a_recent_tick_and_0_with_one(settings):
    settings.READY_WORKER_TICK_MAX_SECONDS = 30
    with pytest.raises(SystemExit) as exited:
        call_command("worker_health")
    assert exited.value.code == 1
    heartbeats.record_tick()
    call_command("worker_health")  # returns: exit status 0
    call_command("worker_health", "--pid", str(os.getpid()))
    with pytest.raises(SystemExit):
        call_command("worker_health", "--pid", str(os.getpid() + 1))
    WorkerHeartbeat.objects.update(ticked_at=timezone.now() - timedelta(seconds=31))
    with pytest.raises(SystemExit):
        call_command("worker_health", "--any")


@pytest.mark.django_db(transaction=True)  # the checks read on a thread of their own
def test_metrics_carry_readiness_and_the_workers_and_outbox_gauges(settings):
    settings.METRICS_TOKEN = "scrape-secret"
    heartbeats.record_tick()
    response = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret")
    assert response.status_code == 200
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }
    assert samples[("reviewer_ready", (("check", "worker"),))] == 1
    assert samples[("reviewer_ready", (("check", "database"),))] == 1
    worker = f"{socket.gethostname()}:{os.getpid()}"
    assert samples[("reviewer_worker_last_tick_age_seconds", (("worker", worker),))] < 60
    assert samples[("reviewer_outbox_due_messages", ())] == 0
    assert "# TYPE reviewer_export_jobs gauge" in response.content.decode()  # the audit app's part
    assert Client().get("/metrics").status_code == 401  # the audit endpoint's token check


@pytest.mark.django_db(transaction=True)
def test_checks_that_do_not_answer_in_time_name_the_database(settings, monkeypatch):
    settings.READY_CHECK_TIMEOUT_SECONDS = 0.2
    released = threading.Event()

    def hanging():
        released.wait(10)  # a database that takes the connection and never answers
        return True, {}

    monkeypatch.setattr(checks, "_database", hanging)
    try:
        readiness = async_to_sync(checks.readiness)(("database", "worker"))
    finally:
        released.set()
    assert readiness.failing == ["database"]
    assert readiness.body(with_details=True)["checks"]["database"]["error"] == "no answer within 0.2 s"
