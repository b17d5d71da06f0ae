"""Peak memory of audit exports over a large trail, against a bare baseline measured in the same run.

    .venv/bin/python bench/export_memory.py                      # 200,000 events on a scratch SQLite file
    .venv/bin/python bench/export_memory.py --events 50000
    .venv/bin/python bench/export_memory.py --database-url postgres://postgres@127.0.0.1:5432/bench_audit

Not a test: it prints numbers. Every measurement runs in a fresh process whose peak RSS is read with
wait4(2), so one export's garbage cannot hide another's. Each export runs twice, over the first tenth
of the trail and over all of it: flat memory means the two peaks are about equal (and close to the
baseline: Django set up and one query). The bundle written from the whole trail is then verified by
`python -m audit.verify` (no Django), against a bare Python baseline that imports what the verifier
imports. A naive export that reads every event into a list is measured for contrast.

A PostgreSQL database given with --database-url is dropped and created again: its name must contain
"bench".
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHILD_TASKS = ("prepare", "generate", "baseline", "csv", "jsonl", "stream", "bundle", "pdf", "naive")


# --------------------------------------------------------------------------------------------------
# Child processes (each runs one task and prints a JSON line)


def _setup_django():
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewer.settings")
    import django

    django.setup()


def _generate(events: int) -> dict:
    """A realistic trail, fast: ten events per proposal lifecycle, hashed with the real rule and
    bulk-inserted with their seals in seq order, as the sequencer writes them (the seal trigger checks
    each continues the chain); a signed checkpoint every AUDIT_CHECKPOINT_EVERY events, as the
    sequencer signs them."""
    import hashlib
    import uuid
    from datetime import UTC, datetime, timedelta

    from django.conf import settings
    from django.core.management import call_command
    from django.db import transaction

    call_command("migrate", verbosity=0)
    from audit.chain.checkpoints import write_checkpoint
    from audit.models import AuditEvent, AuditSeal, ChainHead
    from audit.shapes import event_body
    from audit.verify.hashing import GENESIS_HASH, hash_body
    from tenants.models import Tenant

    tenant = Tenant.objects.create(slug="bench", name="Bench Corp")
    chain = f"tenant:{tenant.id}"
    start = datetime.now(UTC) - timedelta(days=30)
    step = timedelta(days=30) / events
    every = settings.AUDIT_CHECKPOINT_EVERY
    prev, seq, batch = GENESIS_HASH, 0, []
    tools = ["payments.refund", "payments.refund", "crm.email", "ops.deploy"]

    def lifecycle(number: int):
        proposal = f"proposal:{uuid.UUID(int=number)}"
        digest = "sha256:" + hashlib.sha256(str(number).encode()).hexdigest()
        jti = str(uuid.UUID(int=number + 10**9))
        tool = tools[number % len(tools)]
        verdict = "reject" if number % 25 == 0 else "approve"
        yield (
            "agent:refund-demo",
            "proposal.submitted",
            proposal,
            {
                "via": "push",
                "task_id": f"task-{number}",
                "context_id": f"ctx-{number}",
                "request_id": str(number),
                "tool": tool,
                "action_digest": digest,
                "principal": f"customer-{number % 500}",
                "agent_version": "refund-agent@1",
                "supersedes": None,
            },
        )
        yield (
            "system",
            "policy.evaluated",
            proposal,
            {
                "outcome": "require_approval",
                "policies": [{"id": tool.split(".")[0], "version": 1 + number % 2}],
                "requirements": {"thresholds": [{"group": "finance", "count": 1}], "step_up": "per_vote"},
                "reason": "requires approval",
                "errors": [],
                "expires_at": "2026-01-01T00:00:00.000000Z",
            },
        )
        yield (
            "system",
            "proposal.transitioned",
            proposal,
            {"from": "proposed", "to": "awaiting_review", "reason": "requires approval", "rev": 2},
        )
        voter = f"user:reviewer{number % 7}"
        yield (
            voter,
            "vote.cast",
            proposal,
            {
                "verdict": verdict,
                "digest_seen": digest,
                "page_hash": "sha256:" + "ab" * 32,
                "reason": "" if verdict == "approve" else "not this one",
                "groups": ["finance"],
                "auth": {"method": "totp", "at": "2026-01-01T00:00:00.000000Z"},
            },
        )
        target = "approved" if verdict == "approve" else "rejected"
        yield (
            voter,
            "proposal.transitioned",
            proposal,
            {"from": "awaiting_review", "to": target, "reason": "quorum", "rev": 3},
        )
        yield (
            "system",
            "decision.signed",
            proposal,
            {
                "jti": jti,
                "kid": "ed25519-bench",
                "decision": target,
                "reason": "approved by quorum",
                "action_digest": digest,
                "rev": 3,
                "consume": True,
                "approvers": [
                    {
                        "sub": voter,
                        "name": "Reviewer",
                        "group": "finance",
                        "auth": {"method": "totp", "at": "2026-01-01T00:00:00.000000Z"},
                    }
                ],
                "policy": {"id": tool.split(".")[0], "version": 1},
                "task_id": f"task-{number}",
                "request_id": str(number),
            },
        )
        yield (
            "agent:refund-demo",
            "proposal.transitioned",
            proposal,
            {"from": target, "to": "executing", "rev": 4, "reason": "decision consumed"},
        )
        yield "agent:refund-demo", "decision.consumed", proposal, {"jti": jti, "rev": 3}
        yield (
            "agent:refund-demo",
            "proposal.transitioned",
            proposal,
            {"from": "executing", "to": "succeeded", "rev": 5, "reason": "outcome reported"},
        )
        yield (
            "agent:refund-demo",
            "outcome.recorded",
            proposal,
            {"jti": jti, "status": "succeeded", "transaction_id": f"re_{number}", "via": "api"},
        )

    def flush():
        with transaction.atomic():
            events = AuditEvent.objects.bulk_create([event for event, _ in batch])
            AuditSeal.objects.bulk_create(
                [
                    AuditSeal(event=event, chain=chain, **seal)
                    for event, (_, seal) in zip(events, batch, strict=True)
                ]
            )
            for _, seal in batch:
                if seal["seq"] % every == 0:
                    write_checkpoint(chain, seal["seq"], seal["hash"])
        batch.clear()

    number = 0
    while seq < events:
        for actor, verb, subject, data in lifecycle(number):
            if seq >= events:
                break
            seq += 1
            at = start + step * seq
            body = event_body(chain, seq, at, actor, verb, subject, data, prev)
            prev = hash_body(body)
            batch.append(
                (
                    AuditEvent(chain=chain, at=at, actor=actor, verb=verb, subject=subject, data=data),
                    {"seq": seq, "prev_hash": body["prev_hash"], "hash": prev},
                )
            )
        number += 1
        if len(batch) >= 5000:
            flush()
    flush()
    ChainHead.objects.update_or_create(chain=chain, defaults={"seq": seq, "hash": prev})
    return {"events": seq}


def _selection(up_to: int):
    from audit.exports.lines import Selection
    from tenants.queries import tenant_by_key

    tenant = tenant_by_key("bench")
    return Selection.for_tenant(tenant, {}, up_to_seq=up_to)


def _child(task: str, up_to: int, out: Path, events: int) -> dict:
    if task == "prepare":
        _prepare_postgres(os.environ["DATABASE_URL"])
        return {}
    _setup_django()
    if task == "generate":
        return _generate(events)
    from audit.exports.bundles import write_bundle
    from audit.exports.lines import chunks, write_lines
    from audit.models import AuditEvent

    if task == "baseline":
        return {"events": AuditEvent.objects.count()}
    selection = _selection(up_to)
    written = 0
    if task in ("csv", "jsonl"):
        with out.open("wb") as file:
            for written in write_lines(selection, task, file):  # noqa: B007 (the last count is kept)
                pass
    elif task == "stream":  # the HTTP response's iterator, consumed as a client would
        for chunk in chunks(selection, "jsonl"):
            written += chunk.count(b"\n")
    elif task == "bundle":
        for written in write_bundle(selection, out, created_by="bench"):  # noqa: B007
            pass
    elif task == "pdf":
        from audit.exports.pdf import write_report

        for written in write_report(selection, out, created_by="bench"):  # noqa: B007
            pass
    elif task == "naive":  # what not to do: every event in memory at once
        from audit.chain.records import event_dict

        rows = [
            event_dict(row)
            for row in AuditEvent.objects.filter(seq__lte=up_to).values(
                "chain", "seq", "at", "actor", "verb", "subject", "data", "prev_hash", "hash"
            )
        ]
        out.write_text("".join(json.dumps(row) + "\n" for row in rows))
        written = len(rows)
    return {"events": written, "bytes": out.stat().st_size if out.exists() else 0}


# --------------------------------------------------------------------------------------------------
# The parent: runs every child, reads its peak RSS, prints ratios


def _run(args: list[str], env: dict) -> tuple[dict, float, float]:
    """Run a command; returns (its JSON output or {}, peak RSS in MiB, seconds)."""
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        started = time.perf_counter()
        process = subprocess.Popen(args, cwd=ROOT, env=env, stdout=stdout, stderr=stderr)
        _, status, usage = os.wait4(process.pid, 0)  # wait4: this child's own peak RSS
        seconds = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        stdout.seek(0)
        stderr.seek(0)
        output, errors = stdout.read().decode(), stderr.read().decode()
    if process.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(args)} failed ({process.returncode}):\n{errors}\n{output}")
    last = output.strip().splitlines()[-1] if output.strip() else "{}"
    try:
        result = json.loads(last)
    except ValueError:
        result = {"output": last, "exit": process.returncode}
    return result, usage.ru_maxrss / 1024, seconds


def scratch_database(name: str) -> str:
    """A scratch database's name with BENCH_DB_PREFIX in front (e.g. `h_audit_`), so that benchmarks run
    by several people on one PostgreSQL server do not drop one another's databases."""
    return os.environ.get("BENCH_DB_PREFIX", "") + name


def _prepare_postgres(url: str) -> None:
    import dj_database_url
    import psycopg

    config = dj_database_url.parse(url)
    if "bench" not in config["NAME"]:
        raise SystemExit(
            "the PostgreSQL database is dropped and created again: its name must contain 'bench'"
        )
    admin = {
        "host": config["HOST"],
        "port": config["PORT"] or 5432,
        "user": config["USER"],
        "password": config["PASSWORD"] or None,
        "dbname": "postgres",
        "autocommit": True,
    }
    with psycopg.connect(**admin) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{config["NAME"]}"')
        connection.execute(f'CREATE DATABASE "{config["NAME"]}"')


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--database-url", default="", help="a scratch PostgreSQL database (default: SQLite)")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of the peaks (bench/r5)")
    parser.add_argument("--child", choices=CHILD_TASKS, help=argparse.SUPPRESS)
    parser.add_argument("--up-to", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.up_to, Path(args.out or os.devnull), args.events)))
        return

    scratch = Path(tempfile.mkdtemp(prefix="reviewer-bench-"))
    url = args.database_url or f"sqlite:///{scratch / 'bench.sqlite3'}"
    env = {
        **os.environ,
        "DEBUG": "true",
        "DATABASE_URL": url,
        "REVIEWER_DATA_DIR": str(scratch),
        "REVIEWER_SIGNING_KEY_DIR": str(scratch / "keys"),
        "AUDIT_CHECKPOINT_EVERY": "100",
        "LOG_LEVEL": "WARNING",
    }
    env.pop("REVIEWER_SIGNING_KEY", None)
    me = [sys.executable, str(Path(__file__).resolve())]
    if url.startswith("postgres"):
        _run([*me, "--child", "prepare"], env)  # in a child: this runner must stay small (see below)

    print(f"database: {url.split('@')[-1]}, {args.events:,} events, scratch folder {scratch}")
    generated, _, seconds = _run([*me, "--child", "generate", "--events", str(args.events)], env)
    print(f"generated {generated['events']:,} events in {seconds:.1f} s\n")

    _, baseline, _ = _run([*me, "--child", "baseline"], env)
    small, full = max(args.events // 10, 1), args.events
    rows = [("baseline: Django set up, one query", 0, baseline, 0.0)]
    for task in ("csv", "jsonl", "stream", "bundle", "pdf", "naive"):
        for up_to in (small, full):
            out = scratch / f"{task}-{up_to}.{'zip' if task == 'bundle' else task}"
            result, peak, seconds = _run(
                [*me, "--child", task, "--up-to", str(up_to), "--out", str(out)], env
            )
            rows.append((f"{task} export", up_to, peak, seconds))

    bare_env = {
        key: value for key, value in env.items() if key not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")
    }
    _, bare, _ = _run(
        [
            sys.executable,
            "-c",
            "import rfc8785, cryptography.hazmat.primitives.asymmetric.ed25519, zipfile, json, hashlib",
        ],
        bare_env,
    )
    verified, verify_peak, verify_seconds = _run(
        [sys.executable, "-m", "audit.verify", str(scratch / f"bundle-{full}.zip"), "--trust-bundle-keys"],
        bare_env,
    )

    print(f"{'what':38} {'events':>9} {'peak RSS':>10} {'x baseline':>11} {'seconds':>8}")
    for label, events, peak, seconds in rows:
        print(f"{label:38} {events:>9,} {peak:>8.1f} MiB {peak / baseline:>10.2f}x {seconds:>8.1f}")
    # Linux carries a vfork()ed child's parent's peak RSS into the child across execve, so no child can
    # measure below this runner's own peak: it is printed as the floor of every figure.
    floor = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    label = "(floor: this runner's own peak RSS)"
    print(f"\n{label:38} {'':>9} {floor:>8.1f} MiB")
    print(f"{'bare Python (verifier imports only)':38} {'':>9} {bare:>8.1f} MiB {1:>10.2f}x")
    print(
        f"{'python -m audit.verify bundle.zip':38} {full:>9,} {verify_peak:>8.1f} MiB "
        f"{verify_peak / bare:>10.2f}x {verify_seconds:>8.1f}"
    )
    print(f"  verifier said: {verified.get('output', verified)}")
    by_task = {}
    for label, events, peak, _ in rows[1:]:
        by_task.setdefault(label, {})[events] = peak
    print("\nflatness (peak at all events / peak at a tenth):")
    for label, peaks in by_task.items():
        print(f"  {label:36} {peaks[full] / peaks[small]:.2f}")
    if args.json:
        peaks = {label.split()[0]: {"tenth": p[small], "all": p[full]} for label, p in by_task.items()}
        print(json.dumps({"events": full, "baseline": baseline, "floor": floor, "peaks": peaks}))


if __name__ == "__main__":
    main()
