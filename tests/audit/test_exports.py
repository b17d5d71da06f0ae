"""Exports read the audit log only: CSV and JSON Lines narrowed by policy, agent, reviewer and outcome;
verifiable bundles that check offline; background jobs with progress."""

import csv
import io
import json
import zipfile
from datetime import UTC, datetime, timedelta

import pytest

from approvals.services.votes import edit_proposal
from audit.chain import records
from audit.chain.checkpoints import checkpoint_head
from audit.chain.sequencer import sequence_pending
from audit.exports import jobs
from audit.exports.bundles import bundle_segment
from audit.exports.lines import Selection, chunks
from audit.models import AuditEvent, ExportJob, Verb
from audit.verify.bundle import verify_bundle
from tests.audit.util import export_bundle, lifecycle, raw, rewrite_from, tenant_ref, verify_offline
from tests.factories import fresh_step_up, make_agent, make_policy, refund_action, trail_name

pytestmark = pytest.mark.django_db


def exported(tenant, fmt="jsonl", **filters) -> list:
    """The exported events, without the signed head line every export ends with."""
    body = b"".join(chunks(Selection.for_tenant(tenant_ref(tenant), filters), fmt)).decode()
    if fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(body)))
        assert rows[-1]["seq"] == "export_head"
        return rows[:-1]
    lines = [json.loads(line) for line in body.splitlines()]
    assert set(lines[-1]) == {"export_head"}
    return lines[:-1]


def subjects(rows) -> set[str]:
    return {row["subject"] for row in rows}


@pytest.fixture
def mixed(tenant, agent, refund_policy, requester, reviewer_a, reviewer_b, reviewer_c, any_code):
    """Refunds (agent refund-demo) decided by reviewer_a and reviewer_b, one rejected; an ops deploy by
    another agent decided by reviewer_c."""
    make_policy(tenant, "deploys", tool_pattern="ops.deploy", thresholds=[{"group": "ops", "count": 1}])
    deployer = make_agent(tenant, "deploy-bot", push_token="p2", api_token="a2")
    approved = lifecycle(agent, reviewer_a)
    rejected = lifecycle(agent, reviewer_b, verdict="reject")
    deploy = lifecycle(
        deployer, reviewer_c, action={"tool": "ops.deploy", "arguments": {"service": "web"}, "target": "prod"}
    )
    return {"approved": approved, "rejected": rejected, "deploy": deploy}


def test_jsonl_export_holds_every_event_with_its_hash_in_chain_order(mixed, tenant):
    rows = exported(tenant)
    assert [row["seq"] for row in rows] == list(range(1, len(rows) + 1))
    assert len(rows) == AuditEvent.objects.filter(chain=f"tenant:{tenant.id}").count()
    assert set(rows[0]) == {"chain", "seq", "at", "actor", "verb", "subject", "data", "prev_hash", "hash"}


def test_csv_export_has_a_header_and_one_row_per_event(mixed, tenant):
    rows = exported(tenant, "csv")
    assert len(rows) == AuditEvent.objects.filter(chain=f"tenant:{tenant.id}").count()
    assert json.loads(rows[0]["data"]) == AuditEvent.objects.get(chain=f"tenant:{tenant.id}", seq=1).data


def test_csv_export_neutralizes_cells_a_spreadsheet_would_run_as_formulas(tenant, reviewer_a):
    from audit.exports.lines import csv_page

    row = {
        "seq": 1,
        "at": "2026-01-01T00:00:00.000000Z",
        "chain": "tenant:1",
        "actor": "=HYPERLINK(1)",
        "verb": "x",
        "subject": "@SUM(1)",
        "data": {},
        "prev_hash": "p",
        "hash": "h",
    }
    cells = next(csv.reader(io.StringIO(csv_page([row]).decode())))
    assert cells[3] == "'=HYPERLINK(1)" and cells[5] == "'@SUM(1)"


def test_export_narrowed_by_policy_holds_only_that_policys_proposals(mixed, tenant):
    rows = exported(tenant, policy="deploys")
    assert subjects(rows) == {f"proposal:{mixed['deploy'].id}"}
    assert subjects(exported(tenant, policy="refunds@1")) == {
        f"proposal:{mixed['approved'].id}",
        f"proposal:{mixed['rejected'].id}",
    }
    assert exported(tenant, policy="refunds@2") == []


def test_export_narrowed_by_agent_holds_only_that_agents_proposals(mixed, tenant):
    assert subjects(exported(tenant, agent="deploy-bot")) == {f"proposal:{mixed['deploy'].id}"}


def test_export_narrowed_by_reviewer_holds_only_proposals_they_acted_on(mixed, tenant):
    assert subjects(exported(tenant, reviewer="reviewer_b")) == {f"proposal:{mixed['rejected'].id}"}


def test_export_narrowed_by_outcome_holds_proposals_that_reached_it(mixed, tenant):
    assert subjects(exported(tenant, outcome="rejected")) == {f"proposal:{mixed['rejected'].id}"}
    assert subjects(exported(tenant, outcome="approved")) == {
        f"proposal:{mixed['approved'].id}",
        f"proposal:{mixed['deploy'].id}",
    }


def test_export_narrowed_by_agent_includes_a_reviewers_edit_of_its_proposal(
    tenant, agent, refund_policy, requester, reviewer_a, reviewer_b, any_code
):
    from tests.factories import submit

    original = submit(agent)
    edited = edit_proposal(
        original.id,
        reviewer_a,
        arguments={**refund_action()["arguments"], "amount": "30.00"},
        digest_seen=original.action_digest,
        step_up=fresh_step_up(reviewer_a),
    )
    sequence_pending()  # what the on-commit hook does outside a test's transaction
    assert subjects(exported(tenant, agent=agent.slug)) == {
        f"proposal:{original.id}",
        f"proposal:{edited.id}",
    }


def test_export_of_a_period_holds_only_that_periods_events(mixed, tenant):
    cut = AuditEvent.objects.get(
        chain=f"tenant:{tenant.id}", subject=f"proposal:{mixed['deploy'].id}", verb=Verb.PROPOSAL_SUBMITTED
    ).at
    rows = exported(tenant, since=cut.isoformat())
    assert rows and all(row["at"] >= cut.strftime("%Y-%m-%dT%H:%M:%S.%fZ") for row in rows)
    assert f"proposal:{mixed['approved'].id}" not in subjects(rows)


def test_bundle_verifies_offline_without_django_or_a_database(mixed, tenant, tmp_path):
    bundle = export_bundle(tenant, tmp_path / "acme.zip")
    result = verify_offline(bundle, "--trust-bundle-keys")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK:" in result.stdout
    with zipfile.ZipFile(bundle) as archive:
        assert set(archive.namelist()) == {
            "manifest.json",
            "events.jsonl",
            "checkpoints.jsonl",
            "keys.json",
            "README.txt",
        }
        manifest = json.loads(archive.read("manifest.json"))
    assert manifest["format"] == "reviewer-audit-bundle/1"
    assert manifest["tenant"]["slug"] == "acme"
    assert manifest["signature"]["alg"] == "EdDSA"


def test_the_offline_verifier_module_imports_no_django():
    import subprocess
    import sys

    from tests.audit.util import ROOT

    code = "import sys, audit.verify; sys.exit(any(m.split('.')[0] == 'django' for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=False).returncode == 0


def test_bundle_of_a_later_period_starts_after_a_signed_checkpoint_and_verifies(mixed, tenant, tmp_path):
    chain = f"tenant:{tenant.id}"
    since = AuditEvent.objects.get(chain=chain, seq=25).at
    segment = bundle_segment(Selection.for_tenant(tenant_ref(tenant), {"since": since.isoformat()}))
    assert segment.first_seq == 21 and segment.anchor["seq"] == 20
    bundle = export_bundle(tenant, tmp_path / "later.zip", since=since.isoformat())
    result = verify_bundle(bundle)
    assert result.ok, result.problems
    assert result.events == segment.last_seq - 20


def test_bundle_of_an_earlier_period_is_checked_against_the_latest_checkpoint(mixed, tenant, tmp_path):
    chain = f"tenant:{tenant.id}"
    until = AuditEvent.objects.get(chain=chain, seq=15).at + timedelta(microseconds=1)
    # The events one transaction records together share their time, so seq 15's may have companions.
    earlier = AuditEvent.objects.filter(chain=chain, at__lt=until).count()
    assert 15 <= earlier < AuditEvent.objects.filter(chain=chain).count()
    bundle = export_bundle(tenant, tmp_path / "earlier.zip", until=until.isoformat())
    result = verify_bundle(bundle)
    assert result.ok, result.problems
    assert result.events == earlier


def test_bundle_refuses_keys_other_than_the_pinned_ones(mixed, tenant, tmp_path):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from signing_keys import SigningKey

    stranger = Ed25519PrivateKey.generate()
    jwks = {"keys": [SigningKey("stranger", stranger, stranger.public_key()).public_jwk()]}
    result = verify_bundle(export_bundle(tenant, tmp_path / "b.zip"), jwks=jwks)
    assert not result.ok
    assert any("signed by unknown key" in problem for problem in result.problems)


def test_a_later_bundle_must_still_hold_what_an_earlier_bundle_held(
    mixed, tenant, tmp_path, agent, reviewer_a
):
    chain = f"tenant:{tenant.id}"
    earlier = export_bundle(tenant, tmp_path / "earlier.zip")
    lifecycle(agent, reviewer_a)
    assert verify_bundle(export_bundle(tenant, tmp_path / "later.zip"), previous=str(earlier)).ok

    # The operator rewrites the whole chain after seq 30 (hashes recomputed, checkpoint 40 re-signed):
    # the new bundle verifies on its own, but not against what compliance kept.
    rewrite_from(chain, 31, lambda data: {**data, "rewritten": True}, every=True)
    raw("DELETE FROM audit_checkpoint WHERE chain = %s AND seq > 30", [chain])
    checkpoint_head(chain)
    rewritten = export_bundle(tenant, tmp_path / "rewritten.zip")
    assert verify_bundle(rewritten).ok
    against = verify_bundle(rewritten, previous=str(earlier))
    assert not against.ok
    assert "event 31: differs from the earlier bundle" in against.problems[0]
    assert "it was rewritten" in against.problems[0] and against.first_bad_seq == 31


def test_a_background_export_job_runs_to_done_with_progress_and_a_checksum(
    mixed, tenant, compliance, monkeypatch
):
    monkeypatch.setattr(records, "PAGE_SIZE", 7)
    job = jobs.create_export(tenant_ref(tenant), user=compliance, kind="jsonl", filters={})
    assert AuditEvent.objects.filter(
        verb=Verb.EXPORT_CREATED, subject=f"export:{job.id}", actor=trail_name("compliance")
    ).exists()
    steps = jobs._steps(jobs._claim(job.pk))
    next(steps)
    job.refresh_from_db()
    assert job.status == "running" and job.done == 0 and job.total == job.up_to_seq
    progress = []
    for _ in steps:
        job.refresh_from_db()
        progress.append(job.done)
    assert progress[:3] == [7, 14, 21]
    job.refresh_from_db()
    assert job.status == "done" and job.percent == 100
    content = jobs.export_path(job).read_bytes()
    import hashlib

    assert hashlib.sha256(content).hexdigest() == job.sha256 and job.size == len(content)
    assert len(content.splitlines()) == job.up_to_seq + 1  # every event, then the signed head


def test_run_pending_exports_works_in_slices_and_finishes_every_kind(mixed, tenant, compliance, monkeypatch):
    monkeypatch.setattr(records, "PAGE_SIZE", 5)
    queued = [
        jobs.create_export(tenant_ref(tenant), user=compliance, kind=kind, filters={})
        for kind in ("csv", "jsonl", "bundle", "pdf")
    ]
    assert jobs.run_pending_exports(budget_seconds=0) == 0  # no time: nothing is claimed
    ticks = 0
    while ExportJob.objects.exclude(status__in=["done", "failed"]).exists():
        jobs.run_pending_exports(budget_seconds=0.001)  # about one page per tick
        ticks += 1
        assert ticks < 500
    assert ticks > len(queued)
    for job in queued:
        job.refresh_from_db()
        assert job.status == "done", job.error
    bundle = next(job for job in queued if job.kind == "bundle")
    assert verify_bundle(jobs.export_path(bundle)).ok
    pdf = next(job for job in queued if job.kind == "pdf")
    assert jobs.export_path(pdf).read_bytes().startswith(b"%PDF")


def test_a_running_export_abandoned_by_a_dead_worker_is_retried(tenant, agent, compliance):
    job = jobs.create_export(tenant_ref(tenant), user=compliance, kind="csv", filters={})
    ExportJob.objects.filter(pk=job.pk).update(
        status="running", updated_at=datetime.now(UTC) - timedelta(hours=1)
    )
    jobs.run_pending_exports(budget_seconds=5)
    job.refresh_from_db()
    assert job.status == "done"


def test_a_failing_export_is_marked_failed_with_its_reason(tenant, agent, compliance, monkeypatch):
    import audit.exports.jobs

    def broken(*args, **kwargs):
        raise OSError("disk full")
        yield

    monkeypatch.setattr(audit.exports.jobs, "write_lines", broken)
    job = jobs.run_export(jobs.create_export(tenant_ref(tenant), user=compliance, kind="csv", filters={}))
    assert job.status == "failed" and "disk full" in job.error


def test_audit_export_command_writes_a_verifiable_bundle_and_records_the_export(mixed, tenant, tmp_path):
    from django.core.management import call_command

    path = tmp_path / "cli.zip"
    call_command("audit_export", "--tenant", "acme", "--format", "bundle", "--output", str(path))
    assert verify_bundle(path).ok
    assert AuditEvent.objects.filter(verb=Verb.EXPORT_CREATED, data__delivery="command").exists()


def test_the_offline_verifier_accepts_pinned_keys_and_exits_2_on_an_unreadable_file(mixed, tenant, tmp_path):
    from audit.chain.checkpoints import verification_jwks

    bundle = export_bundle(tenant, tmp_path / "b.zip")
    pinned = tmp_path / "jwks.json"
    pinned.write_text(json.dumps(verification_jwks()))
    result = verify_offline(bundle, "--jwks", pinned)
    assert result.returncode == 0 and "keys: pinned by --jwks" in result.stdout
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"not a zip")
    assert verify_offline(junk, "--trust-bundle-keys").returncode == 2


def test_the_bundle_readme_names_the_bundle_not_its_temporary_file(mixed, tenant, tmp_path):
    partial = tmp_path / "acme.zip.part"  # what the export job writes before renaming it
    export_bundle(tenant, partial)
    with zipfile.ZipFile(partial) as archive:
        readme = archive.read("README.txt").decode()
    assert "reviewer-verify acme.zip --jwks" in readme and ".part" not in readme


def _pinned_jwks(tmp_path):
    from audit.chain.checkpoints import verification_jwks

    pinned = tmp_path / "jwks.json"
    pinned.write_text(json.dumps(verification_jwks()))
    return pinned


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_csv_and_jsonl_exports_end_with_a_signed_head_the_offline_verifier_checks(
    mixed, tenant, tmp_path, fmt
):
    """Every export carries the signed head it was cut at. Before, a CSV or JSON Lines
    export ended with its last event and nothing vouched for it: lines could be dropped or changed."""
    path = tmp_path / f"export.{fmt}"
    path.write_bytes(b"".join(chunks(Selection.for_tenant(tenant_ref(tenant), {}), fmt)))
    pinned = _pinned_jwks(tmp_path)
    good = verify_offline(path, "--jwks", pinned)
    assert good.returncode == 0 and "OK:" in good.stdout, good.stdout
    assert f"export of tenant:{tenant.id} cut at seq" in good.stdout

    lines = path.read_bytes().splitlines(keepends=True)
    dropped = tmp_path / f"dropped.{fmt}"
    dropped.write_bytes(b"".join(lines[:3] + lines[4:]))  # one event line removed
    result = verify_offline(dropped, "--jwks", pinned)
    assert result.returncode == 1 and "differ from the ones the head signed" in result.stdout

    changed = tmp_path / f"changed.{fmt}"
    changed.write_bytes(b"".join(lines[:-2] + [lines[-2].replace(b"tenant:", b"tenant:9")] + lines[-1:]))
    result = verify_offline(changed, "--jwks", pinned)
    assert result.returncode == 1 and "FAILED" in result.stdout

    cut = tmp_path / f"cut.{fmt}"
    cut.write_bytes(b"".join(lines[:-1]))  # the signed head removed: the tail can no longer be checked
    result = verify_offline(cut, "--jwks", pinned)
    assert result.returncode == 2 and "signed head" in result.stdout

    assert verify_offline(path, "--trust-bundle-keys").returncode == 2  # an export carries no keys


def test_a_narrowed_export_verifies_and_a_stranger_cannot_sign_its_head(mixed, tenant, tmp_path):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from audit.verify.export import verify_export
    from signing_keys import SigningKey

    path = tmp_path / "refunds.jsonl"
    path.write_bytes(
        b"".join(chunks(Selection.for_tenant(tenant_ref(tenant), {"agent": "refund-demo"}), "jsonl"))
    )
    from audit.chain.checkpoints import verification_jwks

    assert verify_export(path, jwks=verification_jwks()).ok
    stranger = Ed25519PrivateKey.generate()
    jwks = {"keys": [SigningKey("stranger", stranger, stranger.public_key()).public_jwk()]}
    result = verify_export(path, jwks=jwks)
    assert not result.ok and "signed by unknown key" in result.problems[0]
