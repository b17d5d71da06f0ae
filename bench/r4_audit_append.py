"""R4: chained audit append with 8 concurrent writers on one tenant, against a plain insert of the same
row, on PostgreSQL.

    .venv/bin/python bench/r4_audit_append.py      # scratch database $BENCH_DB_PREFIX + bench_audit_append
    BENCH_POSTGRES=postgres://postgres@127.0.0.1:5432 .venv/bin/python bench/r4_audit_append.py --events 4000

Not a test: it prints numbers. Each writer is a thread with its own connection; each event is its own
transaction, as a service's change is.
- **plain**: `AuditEvent.objects.create(...)` of the same row in a transaction, nothing else;
- **chained**: `audit.chain.accept.append(...)` in a transaction, then the sequencer (lock the chain head,
  insert the seals of every committed pending event in one statement, move the head, a checkpoint
  every AUDIT_CHECKPOINT_EVERY) where AUDIT_SEQUENCING puts it: "worker" (the default on PostgreSQL)
  in a `run_worker` process this bench starts, woken after each commit; "after_commit" on this
  process's after-commit thread. The clock stops when every event is chained, not when it is
  accepted (what the sequencer has not chained when the writers finish, this process chains, timed).
Each writer count runs ROUNDS rounds of each side in turns, in alternating order (plain then chained,
then chained then plain), so a drift of the machine's speed falls on both; the ratio is the median of
the rounds' ratios. The chain is verified at the end.
The scratch database is dropped and created again: its name must contain "bench".
"""

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POSTGRES = os.environ.get("BENCH_POSTGRES", "postgres://postgres@127.0.0.1:5432")
ROUNDS = 5


def _setup(database: str) -> None:
    sys.path.insert(0, str(ROOT))
    from bench.export_memory import _prepare_postgres, scratch_database

    url = f"{POSTGRES}/{scratch_database(database)}"
    _prepare_postgres(url)
    folder = Path(tempfile.mkdtemp(prefix="reviewer-bench-audit-append-"))
    os.environ.update(
        {
            "DATABASE_URL": url,
            "DEBUG": "true",
            "REVIEWER_DATA_DIR": str(folder),
            "REVIEWER_SIGNING_KEY_DIR": str(folder / "keys"),
            "LOG_LEVEL": "WARNING",
            "DJANGO_SETTINGS_MODULE": "reviewer.settings",
        }
    )
    for name in ("REDIS_URL", "REVIEWER_SIGNING_KEY"):
        os.environ.pop(name, None)
    import django
    from django.conf import settings
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    settings.DEBUG = False  # no query log: it would cost the side with more queries more


def _row(writer: int, index: int) -> dict:
    return {
        "actor": f"agent:writer-{writer}",
        "verb": "proposal.submitted",
        "subject": f"proposal:{writer}-{index}",
        "data": {"tool": "payments.refund", "amount": "12.00", "writer": writer, "index": index},
    }


def _run(writers: int, each: int, write_one) -> float:
    """Seconds for `writers` threads to write `each` events apiece with `write_one(writer, index)`."""
    from django.db import connections

    start = threading.Barrier(writers + 1)
    errors: list[BaseException] = []

    def writer(number: int) -> None:
        try:
            start.wait()
            for index in range(each):
                write_one(number, index)
        except BaseException as error:  # reported below
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - began


def _plain(chain: str):
    from datetime import UTC, datetime

    from django.db import transaction

    from audit.models import AuditEvent

    def write_one(writer: int, index: int) -> None:
        with transaction.atomic():
            AuditEvent.objects.create(chain=chain, at=datetime.now(UTC), **_row(writer, index))

    return write_one


def _chained(chain: str):
    from django.db import transaction

    from audit.chain.accept import append

    def write_one(writer: int, index: int) -> None:
        with transaction.atomic():
            append(chain, **_row(writer, index))

    return write_one


def _wal_position() -> int:
    """The server's WAL write position in bytes: the whole cluster's, so a round's difference counts
    every writer on the server (nothing else should run during a bench)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
        return int(cursor.fetchone()[0])


def _round(label: str, writers: int, events: int, make, *, chained: bool, number: int) -> tuple[float, float]:
    """One round on a fresh chain: events per second, and WAL bytes written per event (what every
    commit waits to flush)."""
    from audit.chain.sequencer import sequence_chain
    from audit.models import AuditEvent

    each = max(events // writers, 1)
    chain = f"bench:{label}:{writers}:{number}"
    wal_before = _wal_position()
    seconds = _run(writers, each, make(chain))
    if chained:
        began = time.perf_counter()
        sequence_chain(chain)  # normally nothing is left: each writer's hook chained it
        seconds += time.perf_counter() - began
        assert not AuditEvent.objects.filter(chain=chain, seq__isnull=True).exists()
    rate = writers * each / seconds
    # The worker's sealing of the last events may still be under way: its WAL counts in the next round.
    wal = (_wal_position() - wal_before) / (writers * each)
    print(
        f"  {label} x{writers} round {number}: {rate:,.0f} events/s, {wal:,.0f} WAL bytes/event",
        file=sys.stderr,
        flush=True,
    )
    return rate, wal


def _measure(writers: int, events: int) -> dict:
    """ROUNDS rounds of the plain insert and the chained append in turns, in alternating order (plain
    then chained, then chained then plain, ...), so a drift of the machine's speed and whatever one
    side leaves behind (the worker's last wake-ups) fall on both: the median rates and WAL bytes per
    event of each, and the median of the rounds' ratios (a round's chained rate over its plain rate)."""
    plain, chained = [], []
    for number in range(ROUNDS):
        sides = [(plain, "plain", _plain, False), (chained, "chained", _chained, True)]
        for rates, label, make, is_chained in sides if number % 2 == 0 else reversed(sides):
            rates.append(_round(label, writers, events, make, chained=is_chained, number=number))
    return {
        "plain": statistics.median(rate for rate, _ in plain),
        "chained": statistics.median(rate for rate, _ in chained),
        "plain_wal": statistics.median(wal for _, wal in plain),
        "chained_wal": statistics.median(wal for _, wal in chained),
        "ratio": statistics.median(c / p for (c, _), (p, _) in zip(chained, plain, strict=True)),
        "rounds": [c / p for (c, _), (p, _) in zip(chained, plain, strict=True)],
    }


def main(events: int = 2000) -> list[dict]:
    _setup("bench_audit_append")
    from django.conf import settings

    from audit.chain.verification import verify_chain
    from audit.models import AuditEvent
    from bench.common import spread, start_worker, stop_process

    mode = settings.AUDIT_SEQUENCING
    commits = "async" if settings.AUDIT_SEQUENCER_ASYNC_COMMIT else "sync"
    worker = start_worker({}) if mode == "worker" else None
    try:
        _round("warm-up", 2, 200, _chained, chained=True, number=0)
        one = _measure(1, events)
        eight = _measure(8, events)
    finally:
        if worker is not None:
            stop_process(worker)
    checked = verify_chain(f"bench:chained:8:{ROUNDS - 1}")
    gaps = AuditEvent.objects.filter(chain__startswith="bench:chained", seq__isnull=True).count()
    plain_1, plain_8, chained_1, chained_8 = one["plain"], eight["plain"], one["chained"], eight["chained"]
    plain_wal, chained_wal, ratio = eight["plain_wal"], eight["chained_wal"], eight["ratio"]

    print(
        f"R4 audit append, {events:,} events per round, median of {ROUNDS} rounds, PostgreSQL, "
        f"sequencing: {mode}, sequencer commits: {commits}"
    )
    print(f"{'what':44} {'events/s':>10}")
    for what, rate in (
        ("plain insert, 1 writer", plain_1),
        ("plain insert, 8 writers (baseline)", plain_8),
        ("chained append, 1 writer", chained_1),
        ("chained append, 8 writers", chained_8),
    ):
        print(f"{what:44} {rate:>10,.0f}")
    print(f"ratio chained/plain at 8 writers, median of the rounds' ratios: {ratio:.2f}x (target >= 0.8x)")
    print(f"8 writers / 1 writer, chained: {chained_8 / chained_1:.2f}x (target > 1)")
    print(f"WAL per event at 8 writers: plain {plain_wal:,.0f} bytes, chained {chained_wal:,.0f} bytes")
    print(f"last chain verifies: {checked.summary()}; events left unchained: {gaps}")
    return [
        {
            "id": "R4",
            "what": "chained audit append, 8 writers on one tenant vs plain insert of the same row",
            "baseline": f"{plain_8:,.0f} events/s",
            "measured": f"{chained_8:,.0f} events/s (1 writer: {chained_1:,.0f}/s)",
            "ratio": round(ratio, 2),
            "target": ">= 0.8x, and 8 writers > 1 writer",
            "met": ratio >= 0.8 and chained_8 > chained_1,
            "note": f"8 writers, {spread(eight['rounds'])}; "
            f"sequencing: {mode}, sequencer commits: {commits}; WAL per event: plain "
            f"{plain_wal:,.0f} bytes, chained {chained_wal:,.0f} (event, seal and head; the pending rows "
            "are UNLOGGED)",
        }
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=2000)
    main(parser.parse_args().events)
