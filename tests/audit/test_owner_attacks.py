"""Attacks by whoever owns the audit tables, each of which passed before: deleting the
tail together with its checkpoints, rewriting an event and recomputing every hash after it (with the
in-database checkpoints that covered it removed), moving the chain head, and handing the offline
verifier a bundle whose keys are not pinned. The checkpoint files kept outside the database and the
chain head's trigger are what catch them."""

import json

import pytest
from django.db import DatabaseError, connection, transaction

from audit.chain import checkpoint_files
from audit.chain.verification import verify_chain
from audit.models import AuditEvent, ChainHead, Checkpoint
from tests.audit.util import delete_events, export_bundle, lifecycle, raw, rewrite_from, verify_offline

pytestmark = pytest.mark.django_db


@pytest.fixture
def shipped_trail(
    agent, refund_policy, requester, reviewer_a, reviewer_b, django_capture_on_commit_callbacks
):
    """34 events with checkpoints at 10, 20 and 30, in the database and in the checkpoint file (the file
    is written once a checkpoint commits: the captured on-commit callbacks run as a commit would)."""
    with django_capture_on_commit_callbacks(execute=True):
        for voter in (reviewer_a, reviewer_b, reviewer_a):
            lifecycle(agent, voter)
    chain = f"tenant:{agent.tenant_id}"
    if connection.vendor == "postgresql":  # these attacks meet the triggers only if they are on
        with connection.cursor() as cursor:
            cursor.execute("SHOW session_replication_role")
            assert cursor.fetchone() == ("origin",), "an earlier test left the audit triggers off"
    assert [c["seq"] for c in checkpoint_files.read(chain)] == [10, 20, 30]
    assert verify_chain(chain).ok
    return chain


def in_database_only(chain, tmp_path):
    """What verification saw before the checkpoint files: the database alone."""
    nowhere = tmp_path / "no-checkpoint-files"
    nowhere.mkdir()
    return verify_chain(chain, checkpoint_source=nowhere)


def test_deleting_the_tail_with_its_checkpoints_is_named_by_the_checkpoint_file(shipped_trail, tmp_path):
    chain = shipped_trail
    last_kept = AuditEvent.objects.get(chain=chain, seq=25)
    delete_events(chain, 25)
    raw("DELETE FROM audit_checkpoint WHERE chain = %s AND seq > 25", [chain])
    raw("UPDATE audit_chainhead SET seq = 25, hash = %s WHERE chain = %s", [last_kept.hash, chain])
    assert in_database_only(chain, tmp_path).ok  # consistent inside the database: it passed before

    result = verify_chain(chain)
    assert not result.ok
    assert result.first_bad_seq == 26
    assert "holds this chain up to seq 30, now it ends at 25" in result.problems[0]


def test_rewriting_a_covered_event_and_rehashing_everything_after_it_is_named(shipped_trail, tmp_path):
    chain = shipped_trail
    rewrite_from(chain, 14, lambda data: {**data, "amount": "9999.00"})
    raw("DELETE FROM audit_checkpoint WHERE chain = %s AND seq >= 14", [chain])
    assert in_database_only(chain, tmp_path).ok  # every hash and link recomputed: it passed before

    result = verify_chain(chain)
    assert not result.ok
    # The files vouch for seq 10 and 20: the change is somewhere in 11..20, the first seq not vouched for.
    assert result.first_bad_seq == 11
    assert "the checkpoint file kept outside the database" in result.problems[0]
    assert "events 11..20 were rewritten" in result.problems[0]


def test_a_rewritten_event_between_two_checkpoints_is_named_exactly_by_an_earlier_bundle(
    shipped_trail, agent, tmp_path
):
    """With only checkpoints to go by, a rewrite between two of them is the range between them (above);
    an earlier bundle holds every event's hash, so the exact event is named, by `audit_verify --previous`
    and by `python -m audit.verify --previous` alike (both reported seq 11, the range's start, before)."""
    from io import StringIO

    from django.core.management import CommandError, call_command

    from audit.chain.checkpoints import verification_jwks

    chain = shipped_trail
    earlier = export_bundle(agent.tenant, tmp_path / "earlier.zip")
    rewrite_from(chain, 14, lambda data: {**data, "amount": "9999.00"})
    raw("DELETE FROM audit_checkpoint WHERE chain = %s AND seq >= 14", [chain])

    result = verify_chain(chain, previous=earlier)
    assert not result.ok and result.first_bad_seq == 14
    assert "event 14: differs from the earlier bundle" in result.problems[0]
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("audit_verify", "--chain", chain, "--previous", str(earlier), stdout=out)
    assert "first bad event: seq 14" in out.getvalue()

    pinned = tmp_path / "jwks.json"
    pinned.write_text(json.dumps(verification_jwks()))
    later = export_bundle(agent.tenant, tmp_path / "later.zip")
    offline = verify_offline(later, "--jwks", pinned, "--previous", earlier)
    assert offline.returncode == 1
    assert f"first bad event: {chain} seq 14" in offline.stdout


def test_audit_verify_checks_a_shipped_copy_of_the_checkpoint_files_and_a_chain_deleted_whole(
    shipped_trail, tmp_path, settings
):
    from io import StringIO

    from django.core.management import CommandError, call_command

    chain = shipped_trail
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    for path in settings.AUDIT_CHECKPOINT_DIR.iterdir():
        (shipped / path.name).write_bytes(path.read_bytes())
    raw("DELETE FROM audit_checkpoint WHERE chain = %s", [chain])
    delete_events(chain)
    raw("DELETE FROM audit_chainhead WHERE chain = %s", [chain])
    out = StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("audit_verify", "--checkpoints", str(shipped), stdout=out)
    assert failed.value.returncode == 1
    assert f"{chain}: FAILED, first bad event: seq 1" in out.getvalue()


def test_a_forged_line_in_the_checkpoint_file_is_reported(shipped_trail, settings):
    chain = shipped_trail
    path = settings.AUDIT_CHECKPOINT_DIR / checkpoint_files.file_name(chain)
    forged = {**checkpoint_files.read(chain)[0], "seq": 5}
    with path.open("a") as file:
        file.write(json.dumps(forged) + "\n")
    result = verify_chain(chain)
    assert not result.ok and "checkpoint at seq 5: signature does not verify" in result.problems[0]


def test_the_offline_verifier_refuses_a_bundle_whose_keys_are_not_pinned(shipped_trail, tenant, tmp_path):
    bundle = export_bundle(tenant, tmp_path / "bundle.zip")
    refused = verify_offline(bundle)
    assert refused.returncode == 2
    assert "not pinned" in refused.stderr and "--jwks" in refused.stderr
    assert verify_offline(bundle, "--trust-bundle-keys").returncode == 0


def test_every_bundle_carries_a_signed_checkpoint_of_the_head_it_was_cut_at(
    shipped_trail, tenant, tmp_path, django_capture_on_commit_callbacks
):
    import zipfile

    chain = shipped_trail
    with django_capture_on_commit_callbacks(execute=True):
        bundle = export_bundle(tenant, tmp_path / "bundle.zip")
    head = ChainHead.objects.get(chain=chain)
    with zipfile.ZipFile(bundle) as opened:
        manifest = json.loads(opened.read("manifest.json"))
        signed = [json.loads(line)["seq"] for line in opened.read("checkpoints.jsonl").splitlines()]
    assert manifest["chains"][0]["head"]["seq"] == head.seq and head.seq in signed
    assert Checkpoint.objects.filter(chain=chain, seq=head.seq).exists()
    assert head.seq in [c["seq"] for c in checkpoint_files.read(chain)]


@pytest.mark.postgres
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the triggers exist on PostgreSQL only")
@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE audit_chainhead SET seq = seq - 1 WHERE chain = %s",
        "UPDATE audit_chainhead SET hash = 'sha256:' || repeat('1', 64) WHERE chain = %s",
        "UPDATE audit_chainhead SET seq = seq + 1 WHERE chain = %s",
        "DELETE FROM audit_chainhead WHERE chain = %s",
    ],
)
def test_the_chain_head_cannot_move_back_or_away_from_its_event(shipped_trail, sql):
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, [shipped_trail])
