"""`make bench`: run every benchmark module of bench/ and print ONE table of ratios.

Each benchmark is a module named r<number>_<what>.py (r3_intake_http.py, r6_queue_flat.py, ...) with a
main() returning rows {"id", "what", "baseline", "measured", "ratio", "target"} (and optionally "met",
"note"): the measurement against a bare baseline measured in the same run. Each module runs in its own
process (its own settings, databases and servers, and a crash stays its own). The table goes to stdout
and, as JSON, to test-output/bench.json. Ids the issue names that no module produced are listed as
missing.

    .venv/bin/python bench/run.py                 # everything
    .venv/bin/python bench/run.py r3 r6           # some modules (by file name prefix)
"""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUTPUT = ROOT / "test-output" / "bench.json"
EXPECTED = ("R1", "R1a", "R1r", "R2", "R3", "R4", "R5", "R5b", "R5c", "R6", "R7", "R8", "R9", "R10", "R11")
MODULE = re.compile(r"^r\d+[a-z]?_\w+\.py$")
RESULT_MARK = "BENCH-ROWS "  # the child prints its rows on one line after this mark


def modules(selected: list[str]) -> list[str]:
    names = sorted(path.stem for path in BENCH.glob("r*.py") if MODULE.match(path.name))
    # "r1" selects r1_* and r1a_*, never r10_*.
    return [
        name
        for name in names
        if not selected or any(re.match(rf"{re.escape(s)}[a-z]?_", name) for s in selected)
    ]


def run_module(name: str) -> list[dict]:
    """Run bench/<name>.py's main() in a child process; its rows, or one error row."""
    code = f"import json, bench.{name} as m; print({RESULT_MARK!r} + json.dumps(m.main()))"
    started = time.perf_counter()
    process = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env={**os.environ}
    )
    seconds = time.perf_counter() - started
    sys.stderr.write(process.stderr[-4000:] if process.returncode else "")
    for line in reversed(process.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            rows = json.loads(line[len(RESULT_MARK) :])
            for row in rows:
                row.setdefault("module", name)
                row.setdefault("seconds", round(seconds, 1))
            return rows
    return [
        {
            "id": name,
            "what": f"bench/{name}.py failed (exit {process.returncode})",
            "module": name,
            "baseline": "",
            "measured": "",
            "ratio": None,
            "target": "",
            "met": False,
            "note": (process.stderr.strip().splitlines() or ["no output"])[-1][:200],
        }
    ]


def _holds(value: float, sign: str, bound: str) -> bool:
    return value >= float(bound) if sign in ("≥", ">=") else value <= float(bound)


def met(row: dict) -> bool | None:
    """A row's own verdict, else its ratio against the last bound of its target (≥ 0.5x, ≤ 1.2x); a row
    with ratios per percentile ({"p50": .., "p95": ..}) against each bound its target names (p95 ≤ 1.5x)."""
    if "met" in row:
        return row["met"]
    ratio, target = row.get("ratio"), row.get("target", "")
    if isinstance(ratio, dict):
        bounds = [
            (p, s, b) for p, s, b in re.findall(r"(p\d+)\s*(≥|>=|≤|<=)\s*([0-9.]+)x", target) if p in ratio
        ]
        return all(_holds(ratio[p], s, b) for p, s, b in bounds) if bounds else None
    bounds = re.findall(r"(≥|>=|≤|<=)\s*([0-9.]+)x", target)
    if ratio is None or not bounds:
        return None
    return _holds(ratio, *bounds[-1])


def _ratio_text(ratio) -> str:
    if isinstance(ratio, dict):
        return " ".join(f"{name} {value:.2f}x" for name, value in ratio.items())
    return f"{ratio:.2f}x" if isinstance(ratio, int | float) else "-"


def table(rows: list[dict]) -> str:
    header = ("id", "what", "baseline", "measured", "ratio", "target", "")
    lines = [header]
    for row in rows:
        verdict = {True: "ok", False: "MISSED", None: "-"}[met(row)] if row.get("ratio") is not None else ""
        ratio = _ratio_text(row.get("ratio"))
        lines.append(
            (
                row["id"],
                row["what"],
                str(row["baseline"]),
                str(row["measured"]),
                ratio,
                row["target"],
                verdict,
            )
        )
    widths = [min(max(len(line[i]) for line in lines), 60) for i in range(len(header))]
    out = []
    for number, line in enumerate(lines):
        out.append(
            "  ".join(cell[:60].ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        )
        if number == 0:
            out.append("  ".join("-" * width for width in widths))
    return "\n".join(out)


def main(selected: list[str]) -> int:
    rows = []
    for name in modules(selected):
        print(f"running bench/{name}.py ...", file=sys.stderr, flush=True)
        rows += run_module(name)
    produced = {row["id"] for row in rows}
    if not selected:
        rows += [
            {
                "id": id_,
                "what": "no module produced it",
                "baseline": "",
                "measured": "",
                "ratio": None,
                "target": "",
                "missing": True,
            }
            for id_ in EXPECTED
            if id_ not in produced
        ]
    order = {id_: number for number, id_ in enumerate(EXPECTED)}

    def place(row):  # R5pdf and R6w go under R5 and R6
        known = max((id_ for id_ in EXPECTED if row["id"].startswith(id_)), key=len, default="")
        return (order.get(known, len(order)), row["id"] != known, row["id"])

    rows.sort(key=place)
    for row in rows:
        row["met"] = met(row)
    print(table(rows))
    for row in rows:
        if row.get("note"):
            print(f"  {row['id']}: {row['note']}")
    missed = [row["id"] for row in rows if row["met"] is False]
    if missed:
        print(
            f"\nmissed: {', '.join(missed)}. Each one's profile and the design that would reach it: "
            'bench/README.md, "Where each missed row stands".'
        )
    OUTPUT.parent.mkdir(exist_ok=True)
    OUTPUT.write_text(
        json.dumps({"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows}, indent=2) + "\n"
    )
    print(f"\nwritten to {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
