"""What the benchmark modules share: a scratch PostgreSQL database, Django set up on it, percentiles.

Benchmarks run with DEBUG on (a signing key is made on the fly, no host list to configure); the bare
baselines run under the same settings, in the same process or server, so the ratios compare like
with like.
"""

import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A server whose databases may be dropped: every scratch database's name contains "bench".
POSTGRES = os.environ.get("BENCH_POSTGRES", "postgres://postgres@127.0.0.1:5432")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")


def scratch_environment(database: str) -> dict:
    """Environment variables of a run on a fresh PostgreSQL database named `database` (with
    BENCH_DB_PREFIX in front; dropped and created again: its name must contain "bench") and a fresh data
    folder."""
    from bench.export_memory import _prepare_postgres, scratch_database

    url = f"{POSTGRES}/{scratch_database(database)}"
    _prepare_postgres(url)
    folder = Path(tempfile.mkdtemp(prefix=f"reviewer-{database}-"))
    return {
        "DATABASE_URL": url,
        "DEBUG": "true",
        "REVIEWER_DATA_DIR": str(folder),
        "REVIEWER_SIGNING_KEY_DIR": str(folder / "keys"),
        "LOG_LEVEL": "WARNING",
        "ALLOWED_HOSTS": "127.0.0.1,localhost,testserver",
        "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
    }


def setup_django(environment: dict, settings: str = "reviewer.settings") -> None:
    """Django in this process, on the scratch database, migrated."""
    os.environ.update(environment)
    os.environ.pop("REDIS_URL", None)
    os.environ.pop("REVIEWER_SIGNING_KEY", None)
    os.environ["DJANGO_SETTINGS_MODULE"] = settings
    sys.path.insert(0, str(ROOT))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def start_worker(environment: dict, settings: str = "reviewer.settings") -> subprocess.Popen:
    """`manage.py run_worker` on the scratch database, as deployed next to the HTTP processes (with
    AUDIT_SEQUENCING = "worker" it chains the audit events they accept); returns once it has started."""
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "run_worker"],
        cwd=ROOT,
        env={**os.environ, **environment, "DJANGO_SETTINGS_MODULE": settings, "LOG_LEVEL": "INFO"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stderr is not None
    for line in worker.stderr:
        if "worker started" in line:
            # Keep reading its log so a full pipe never blocks it.
            threading.Thread(target=worker.stderr.read, daemon=True).start()
            return worker
    raise SystemExit(f"run_worker did not start (exit {worker.wait()})")


def stop_process(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def percentile(samples: list[float], share: float) -> float:
    """The `share` quantile (0.5 = median, 0.95 = p95) of the samples, interpolated."""
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[round(share * 100) - 1]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


_orders = itertools.count(100_000)


def refund_request() -> dict:
    """An approval request for a refund of an order of its own (thread-safe: itertools.count): as in
    real traffic and the load test, each intake counts its target's history, not that of one order
    every request of the run refunds again (which grew with the run: thousands of rows a read)."""
    from tests import factories

    return factories.approval_request(action=factories.refund_action(order_id=str(next(_orders))))


def spread(values: list[float], unit: str = "x", digits: int = 2, label: str = "rounds") -> str:
    """A row's values over its rounds, in order, with their range: "rounds: 0.34x, 0.41x, 0.36x
    (0.34–0.41x)". A row's one figure hides how far its rounds were apart; this says it."""
    shown = ", ".join(f"{value:.{digits}f}{unit}" for value in values)
    if len(values) < 2:
        return f"{label}: {shown or 'none'}"
    return f"{label}: {shown} ({min(values):.{digits}f}–{max(values):.{digits}f}{unit})"


def part_ratios(baseline: list[float], measured: list[float], share: float, parts: int = 4) -> list[float]:
    """For a row whose samples were taken in turns but not in rounds: the `share` quantile's ratio over
    each of `parts` consecutive parts of both series, the spread `spread` prints."""
    size = min(len(baseline), len(measured)) // parts
    if size < 2:
        return []
    return [
        percentile(measured[start : start + size], share) / percentile(baseline[start : start + size], share)
        for start in range(0, size * parts, size)
    ]
