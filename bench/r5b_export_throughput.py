"""R5b: audit export throughput (CSV and JSON Lines, the background job's writer) against PostgreSQL's
own `COPY (…) TO STDOUT` of the same rows: ≥ 0.3x. R5c: offline verification of a bundle of the same
trail (`audit.verify`'s bundle check, no Django): ≥ 100,000 events per CPU second (the verifier is one
thread; its CPU time does not count the other processes of a shared machine, its wall clock does).

On a scratch PostgreSQL database, a trail of BENCH_EXPORT_THROUGHPUT_EVENTS events (30,000 by default;
bench/export_memory.py's generator: ten events per proposal lifecycle, hashed with the real rule, a
signed checkpoint every AUDIT_CHECKPOINT_EVERY). The baseline copies exactly the rows and columns the
export reads (the same queryset's SQL: chained events of the tenant's chain in seq order) and only
counts the bytes it receives. Rounds alternate (COPY, csv, jsonl; ROUNDS times), so the machine's other
load falls on every side alike; each figure is the best round (the least disturbed).
"""

import json
import os
import tempfile
import time
import zipfile
from pathlib import Path

from bench.common import scratch_environment, setup_django, spread

EVENTS = int(os.environ.get("BENCH_EXPORT_THROUGHPUT_EVENTS", "30000"))
ROUNDS = 3
VERIFY_TARGET = 100_000  # events per second


def _copy_rate(selection) -> tuple[float, int]:
    from django.db import connection

    from audit.chain.records import EVENT_FIELDS

    sql, params = selection.events().order_by("seq").values(*EVENT_FIELDS).query.sql_with_params()
    started = time.perf_counter()
    size = 0
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)", params) as copy:
            for block in copy:
                size += len(block)
    return EVENTS / (time.perf_counter() - started), size


def _export_rate(selection, fmt: str, folder: Path) -> tuple[float, int]:
    from audit.exports.lines import write_lines

    path = folder / f"export.{fmt}"
    started = time.perf_counter()
    with path.open("wb") as file:
        for written in write_lines(selection, fmt, file):  # noqa: B007 (the last count is kept)
            pass
    seconds = time.perf_counter() - started
    if written != EVENTS:
        raise SystemExit(f"the {fmt} export wrote {written} events, not {EVENTS}")
    return EVENTS / seconds, path.stat().st_size


def _verify_rate(bundle: Path, jwks: dict | None) -> tuple[float, float]:
    """(events per CPU second, events per second) of one verify_bundle of `bundle`."""
    from audit.verify.bundle import verify_bundle

    started, cpu = time.perf_counter(), time.process_time()
    result = verify_bundle(bundle, jwks=jwks)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    if not result.ok or result.events < EVENTS:
        raise SystemExit(f"the bundle did not verify: {result.summary()}")
    return result.events / cpu, result.events / seconds


def main() -> list[dict]:
    environment = scratch_environment("reviewer_bench_r5b")
    setup_django(environment)
    from bench.export_memory import _generate, _selection

    _generate(EVENTS)
    selection = _selection(EVENTS)
    folder = Path(tempfile.mkdtemp(prefix="reviewer-r5b-"))
    rates: dict[str, list[float]] = {"copy": [], "csv": [], "jsonl": []}
    sizes: dict[str, int] = {}
    load = []
    for _ in range(ROUNDS):
        load.append(os.getloadavg()[0])
        rate, sizes["copy"] = _copy_rate(selection)
        rates["copy"].append(rate)
        for fmt in ("csv", "jsonl"):
            rate, sizes[fmt] = _export_rate(selection, fmt, folder)
            rates[fmt].append(rate)

    from audit.exports.bundles import write_bundle

    bundle = folder / "bundle.zip"
    for _ in write_bundle(selection, bundle, created_by="bench"):
        pass
    # Compliance pins the keys it trusts (`reviewer-verify --jwks`); these are the bundle's own, pinned.
    with zipfile.ZipFile(bundle) as opened:
        pinned = json.loads(opened.read("keys.json"))
    verify_rates, verify_wall, unpinned_rates = [], [], []
    for _ in range(ROUNDS):
        rate, wall = _verify_rate(bundle, pinned)
        verify_rates.append(rate)
        verify_wall.append(wall)
        unpinned_rates.append(_verify_rate(bundle, None)[0])

    copy, csv_rate, jsonl_rate, verify = (
        max(rates["copy"]),
        max(rates["csv"]),
        max(rates["jsonl"]),
        max(verify_rates),
    )
    worst = min(csv_rate, jsonl_rate)
    round_ratios = [
        min(c, j) / b for b, c, j in zip(rates["copy"], rates["csv"], rates["jsonl"], strict=True)
    ]
    loads = f"load average {min(load):.1f}–{max(load):.1f}"
    return [
        {
            "id": "R5b",
            "what": f"audit export throughput, {EVENTS:,} events (worst of csv, jsonl)",
            "baseline": f"COPY TO STDOUT {copy:,.0f} events/s",
            "measured": f"{worst:,.0f} events/s",
            "ratio": round(worst / copy, 2),
            "target": "≥ 0.3x",
            "note": f"csv {csv_rate:,.0f}/s ({sizes['csv']:,} bytes), jsonl {jsonl_rate:,.0f}/s "
            f"({sizes['jsonl']:,} bytes), COPY {copy:,.0f}/s ({sizes['copy']:,} bytes); best of {ROUNDS} "
            f"alternating rounds; each round's worst against its COPY, "
            f"{spread(round_ratios)}"
            f"; {loads}",
        },
        {
            "id": "R5c",
            "what": f"offline verification of a bundle of {EVENTS:,} events (audit.verify)",
            "baseline": f"target {VERIFY_TARGET:,} events/s",
            "measured": f"{verify:,.0f} events/s",
            "ratio": round(verify / VERIFY_TARGET, 2),
            "target": "≥ 1.0x (≥ 100,000 events/s)",
            "note": f"{bundle.stat().st_size:,} bytes; events per CPU second of the verifying process, "
            f"keys pinned (one thread; wall clock {max(verify_wall):,.0f}/s on this shared machine; with "
            f"--trust-bundle-keys, every line decoded, {max(unpinned_rates):,.0f}/s); best of {ROUNDS}, "
            f"{spread([rate / VERIFY_TARGET for rate in verify_rates])}; {loads}",
        },
    ]


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
