"""R5: peak memory of the audit exports at 10x events (all of the trail vs its first tenth): ≤ 1.1x.

A wrapper of bench/export_memory.py (which also prints its own detailed table when run alone): it runs
that script on a scratch PostgreSQL database with BENCH_EXPORT_EVENTS events (50,000 by default, a
few minutes on 2 cores) and reads its JSON line. R5 is the worst of the streaming exports (csv, jsonl,
the HTTP stream, the bundle); the PDF report (which keeps per-proposal counters by design) and the
naive export (everything in a list) are shown for contrast.
"""

import json
import os
import subprocess
import sys

from bench.common import POSTGRES, ROOT
from bench.export_memory import scratch_database

EVENTS = int(os.environ.get("BENCH_EXPORT_EVENTS", "50000"))
STREAMING = ("csv", "jsonl", "stream", "bundle")


def main() -> list[dict]:
    output = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "export_memory.py"),
            "--events",
            str(EVENTS),
            "--database-url",
            f"{POSTGRES}/{scratch_database('reviewer_bench_r5')}",
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result = json.loads(output.strip().splitlines()[-1])
    peaks = result["peaks"]

    def row(id_, what, tasks, target, met=None):
        worst = max(tasks, key=lambda task: peaks[task]["all"] / peaks[task]["tenth"])
        ratio = peaks[worst]["all"] / peaks[worst]["tenth"]
        return {
            "id": id_,
            "what": what.format(task=worst),
            "baseline": f"{peaks[worst]['tenth']:.0f} MiB at {EVENTS // 10:,}",
            "measured": f"{peaks[worst]['all']:.0f} MiB at {EVENTS:,}",
            "ratio": round(ratio, 2),
            "target": target,
            **({"met": met} if met is not None else {}),
        }

    return [
        row("R5", "export peak memory at 10x events (worst: {task})", STREAMING, "≤ 1.1x"),
        row("R5pdf", "PDF report, same (info: per-proposal counters)", ("pdf",), "info", met=None),
        row("R5naive", "naive export, same (contrast)", ("naive",), "info", met=None),
    ]


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
