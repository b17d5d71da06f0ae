"""AUDIT_SEQUENCING = "worker": the appending process only accepts events (pending) and wakes the workers
after commit; the worker's sequencer thread chains them. Nothing is lost across a killed worker, nothing
is chained twice by two workers, and a seal a crash lost with its asynchronous commit is sealed again
from its still-pending event (PostgreSQL, real threads and processes)."""

import os
import signal
import subprocess
import sys
import threading

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from audit.chain.accept import append
from audit.chain.sequencer import make_seals_durable, sequence_chain, sequence_pending
from audit.chain.sequencer_thread import SequencerThread
from audit.chain.verification import verify_chain
from audit.metrics.prometheus import exposition
from audit.models import AuditEvent, AuditPending, AuditSeal, ChainHead, Checkpoint
from tests.audit.util import ROOT

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="NOTIFY and async commit are PostgreSQL's"),
]

CHAIN = "tenant:sequencing"
DEADLINE = 60  # seconds a wait may take at most before the test fails (never a pass condition)


@pytest.fixture
def worker_mode(settings):
    settings.AUDIT_SEQUENCING = "worker"


def accept(count: int, chain: str = CHAIN, writer: int = 0) -> None:
    for index in range(count):
        with transaction.atomic():
            append(chain, actor=f"agent:w{writer}", verb="proposal.submitted", subject=f"proposal:{index}")


def wait_until_nothing_pending(*sequencers: SequencerThread) -> None:
    """Wait pass by pass (each sequencer's own signal) until no event is pending."""
    target = [s.passes for s in sequencers]
    while AuditPending.objects.exists():
        target = [count + 1 for count in target]
        assert any(s.wait_for_passes(n, DEADLINE) for s, n in zip(sequencers, target, strict=True)), (
            "no sequencer pass within the deadline"
        )


def chained_seqs(chain: str = CHAIN) -> list[int]:
    return list(AuditSeal.objects.filter(chain=chain).order_by("seq").values_list("seq", flat=True))


@pytest.mark.django_db(transaction=True)
def test_the_appending_process_leaves_its_events_pending_and_the_worker_chains_them(worker_mode):
    accept(3)
    assert AuditPending.objects.filter(chain=CHAIN).count() == 3  # the committing process chained nothing
    assert not AuditSeal.objects.filter(chain=CHAIN).exists()

    stop = threading.Event()
    # An interval far beyond the deadline: only the commits' NOTIFY can make it chain what follows.
    sequencer = SequencerThread(stop, interval=3600).start()
    try:
        assert sequencer.first_pass.wait(DEADLINE)
        assert chained_seqs() == [1, 2, 3]  # its first pass caught up with what waited for a worker
        accept(2)
        wait_until_nothing_pending(sequencer)
    finally:
        stop.set()
        sequencer.join(DEADLINE)
    assert chained_seqs() == [1, 2, 3, 4, 5]
    assert verify_chain(CHAIN).ok


@pytest.mark.django_db(transaction=True)
def test_two_workers_chain_eight_writers_events_once_each_in_one_chain(worker_mode, settings):
    settings.AUDIT_CHECKPOINT_EVERY = 25
    writers, each = 8, 25
    stop = threading.Event()
    sequencers = [SequencerThread(stop, interval=3600).start() for _ in range(2)]
    errors: list[BaseException] = []

    def write(number: int) -> None:
        try:
            accept(each, writer=number)
        except BaseException as error:  # reported by the main thread
            errors.append(error)
        finally:
            connections.close_all()

    try:
        assert all(s.first_pass.wait(DEADLINE) for s in sequencers)
        threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(DEADLINE)
        assert not errors, errors
        wait_until_nothing_pending(*sequencers)
    finally:
        stop.set()
        for sequencer in sequencers:
            sequencer.join(DEADLINE)
    total = writers * each
    assert chained_seqs() == list(range(1, total + 1))
    assert AuditSeal.objects.filter(chain=CHAIN).values("event_id").distinct().count() == total
    assert AuditEvent.objects.filter(chain=CHAIN).count() == total
    assert ChainHead.objects.get(chain=CHAIN).seq == total
    assert Checkpoint.objects.filter(chain=CHAIN).count() == total // 25
    result = verify_chain(CHAIN)
    assert result.ok, result.problems


def _start_worker(env: dict) -> subprocess.Popen:
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "run_worker", "--interval", "3600"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stderr is not None
    for line in worker.stderr:  # "worker started" comes once its sequencer has caught up
        if "worker started" in line:
            threading.Thread(target=worker.stderr.read, daemon=True).start()
            return worker
    raise AssertionError(f"run_worker did not start (exit {worker.wait()})")


@pytest.mark.django_db(transaction=True)
def test_events_accepted_while_the_worker_was_killed_are_chained_when_it_starts_again(
    worker_mode, settings, tmp_path
):
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "AUDIT_SEQUENCING": "worker",
        "REVIEWER_DATA_DIR": str(tmp_path / "data"),
        "REVIEWER_SIGNING_KEY_DIR": str(settings.SIGNING_KEY_DIR),
        "AUDIT_CHECKPOINT_DIR": str(settings.AUDIT_CHECKPOINT_DIR),
        "DEBUG": "true",
        "LOG_LEVEL": "INFO",
    }
    for name in ("REVIEWER_SIGNING_KEY", "REVIEWER_SIGNING_KEY_FILE", "DJANGO_SETTINGS_MODULE", "REDIS_URL"):
        env.pop(name, None)
    accept(2)
    worker = _start_worker(env)
    try:
        assert chained_seqs() == [1, 2]
        worker.send_signal(signal.SIGKILL)  # no clean shutdown
        worker.wait(DEADLINE)
        accept(3)
        assert AuditPending.objects.filter(chain=CHAIN).count() == 3  # nobody chains them meanwhile
        worker = _start_worker(env)
        assert chained_seqs() == [1, 2, 3, 4, 5]
        assert not AuditPending.objects.exists()
    finally:
        worker.kill()
        worker.wait(DEADLINE)
    assert verify_chain(CHAIN).ok


@pytest.mark.django_db(transaction=True)
def test_a_seal_lost_with_its_asynchronous_commit_is_sealed_again_from_its_pending_event(settings):
    settings.AUDIT_CHECKPOINT_EVERY = 1000  # no checkpoint due: every batch commits asynchronously
    accept(5)  # chained after each commit (after_commit mode)
    before = list(
        AuditSeal.objects.filter(chain=CHAIN).order_by("seq").values_list("event_id", "seq", "hash")
    )
    assert [seq for _, seq, _ in before] == [1, 2, 3, 4, 5]
    # What a crash before the WAL writer flushed the last two batches leaves: those seals gone, their
    # events pending again and the head back where it was (all three were one transaction).
    lost = [event_id for event_id, seq, _ in before if seq > 3]
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")  # past the append-only triggers
        try:
            cursor.execute("DELETE FROM audit_auditseal WHERE event_id = ANY(%s)", [lost])
            cursor.execute(
                "INSERT INTO audit_auditpending (event_id, chain) SELECT unnest(%s::bigint[]), %s",
                [lost, CHAIN],
            )
            cursor.execute(
                "UPDATE audit_chainhead SET seq = 3, hash = %s WHERE chain = %s", [before[2][2], CHAIN]
            )
        finally:
            cursor.execute("SET session_replication_role = origin")
    assert AuditPending.objects.filter(chain=CHAIN).count() == 2
    assert ChainHead.objects.get(chain=CHAIN).seq == 3

    sequence_pending()  # the next sequencer run
    after = list(AuditSeal.objects.filter(chain=CHAIN).order_by("seq").values_list("event_id", "seq", "hash"))
    assert after == before
    assert verify_chain(CHAIN).ok


@pytest.mark.django_db(transaction=True)
def test_only_a_batch_with_a_checkpoint_due_waits_for_its_flush(settings):
    settings.AUDIT_CHECKPOINT_EVERY = 3
    accept(2)
    with CaptureQueriesContext(connection) as quiet:
        accept(1)  # the chain's third event: a checkpoint is due
    assert not any("synchronous_commit = off" in q["sql"] for q in quiet.captured_queries)
    with CaptureQueriesContext(connection) as batch:
        accept(1)
    assert any("synchronous_commit = off" in q["sql"] for q in batch.captured_queries)

    settings.AUDIT_SEQUENCER_ASYNC_COMMIT = False
    with CaptureQueriesContext(connection) as synchronous:
        accept(1)
    assert not any("synchronous_commit = off" in q["sql"] for q in synchronous.captured_queries)


@pytest.mark.django_db(transaction=True)
def test_making_seals_durable_commits_a_row_lock_synchronously():
    accept(1)
    with CaptureQueriesContext(connection) as flush:
        make_seals_durable(CHAIN)
    sql = [q["sql"] for q in flush.captured_queries]
    assert any("synchronous_commit = on" in s for s in sql)
    assert any("FOR UPDATE" in s for s in sql)


@pytest.mark.django_db(transaction=True)
def test_prometheus_names_the_events_no_worker_has_chained_yet(worker_mode):
    accept(2)
    text = exposition()
    assert f'reviewer_audit_pending_events{{chain="{CHAIN}"}} 2.0' in text
    assert f'reviewer_audit_oldest_pending_seconds{{chain="{CHAIN}"}}' in text
    sequence_chain(CHAIN)
    assert f'reviewer_audit_pending_events{{chain="{CHAIN}"}} 0.0' in exposition()
