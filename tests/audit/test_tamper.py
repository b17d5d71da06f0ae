"""Tampering with the stored trail (bypassing the models) is named by `audit_verify` and by the offline
verifier of an exported bundle; on PostgreSQL the database itself refuses changes."""

import zipfile
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction

from audit.chain.verification import verify_chain
from audit.models import AuditEvent, ChainHead, Checkpoint
from audit.verify.bundle import verify_bundle
from tests.audit.util import (
    change_one_byte,
    delete_events,
    export_bundle,
    lifecycle,
    raw,
    rewrite_from,
    swap,
    verify_offline,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def trail(agent, refund_policy, requester, reviewer_a, reviewer_b):
    """Policy setup and three full lifecycles: 34 events, checkpoints at 10, 20 and 30."""
    for voter in (reviewer_a, reviewer_b, reviewer_a):
        lifecycle(agent, voter)
    chain = f"tenant:{agent.tenant_id}"
    assert verify_chain(chain).ok
    return chain


def audit_verify(tenant_slug="acme") -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("audit_verify", "--tenant", tenant_slug, stdout=out)
    except CommandError as error:
        return error.returncode, out.getvalue()
    return 0, out.getvalue()


def test_an_untouched_trail_verifies_in_the_database_and_offline(trail, tenant, tmp_path):
    code, output = audit_verify()
    assert code == 0 and "OK" in output
    result = verify_offline(export_bundle(tenant, tmp_path / "bundle.zip"), "--trust-bundle-keys")
    assert result.returncode == 0, result.stdout
    assert "OK: 34 events" in result.stdout


def test_one_changed_byte_in_event_data_is_named_by_audit_verify_and_the_offline_verifier(
    trail, tenant, tmp_path
):
    seq = AuditEvent.objects.get(chain=trail, verb="vote.cast", seq__gt=10, seq__lt=20).seq
    change_one_byte(trail, seq, '"approve"', '"Approve"')

    code, output = audit_verify()
    assert code == 1
    assert f"first bad event: seq {seq}" in output
    assert "content does not match its hash" in output

    result = verify_offline(export_bundle(tenant, tmp_path / "bundle.zip"), "--trust-bundle-keys")
    assert result.returncode == 1
    assert f"event {seq}: content does not match its hash" in result.stdout
    assert f"first bad event: {trail} seq {seq}" in result.stdout


def test_deleted_last_events_are_named_by_audit_verify_and_the_offline_verifier(trail, tenant, tmp_path):
    delete_events(trail, 31)

    code, output = audit_verify()
    assert code == 1
    assert "first bad event: seq 32" in output
    assert "events 32..34 were removed" in output

    result = verify_offline(export_bundle(tenant, tmp_path / "bundle.zip"), "--trust-bundle-keys")
    assert result.returncode == 1
    assert f"first bad event: {trail} seq 32" in result.stdout


def test_truncation_that_also_rewinds_the_head_is_caught_by_the_later_checkpoint(trail, tenant, tmp_path):
    """Someone deletes the tail and moves the chain head back: the checkpoint signed at seq 30 remains."""
    delete_events(trail, 25)
    head_hash = AuditEvent.objects.get(chain=trail, seq=25).hash
    raw("UPDATE audit_chainhead SET seq = 25, hash = %s WHERE chain = %s", [head_hash, trail])

    code, output = audit_verify()
    assert code == 1
    assert "first bad event: seq 26" in output
    assert "checkpoint signed the chain at seq 30" in output

    result = verify_offline(export_bundle(tenant, tmp_path / "bundle.zip"), "--trust-bundle-keys")
    assert result.returncode == 1
    assert "checkpoint signed the chain at seq 30" in result.stdout


def test_two_reordered_events_are_named_by_audit_verify_and_the_offline_verifier(trail, tenant, tmp_path):
    swap(trail, 14, 15)

    code, output = audit_verify()
    assert code == 1
    assert "first bad event: seq 14" in output
    assert "prev_hash does not match" in output

    result = verify_offline(export_bundle(tenant, tmp_path / "bundle.zip"), "--trust-bundle-keys")
    assert result.returncode == 1
    assert f"first bad event: {trail} seq 14" in result.stdout


def test_a_rewritten_chain_with_recomputed_hashes_contradicts_its_signed_checkpoint(trail):
    """An attacker who recomputes every hash after a change still cannot re-sign the checkpoints."""
    rewrite_from(trail, 12, lambda data: {**data, "forged": True})

    result = verify_chain(trail)
    assert not result.ok
    assert result.first_bad_seq == 11  # somewhere after the last checkpoint that still holds (seq 10)
    assert "events 11..20 were rewritten" in result.problems[0]


def test_a_checkpoint_with_a_forged_signature_is_named(trail):
    raw("UPDATE audit_checkpoint SET signature = %s WHERE chain = %s AND seq = 20", ["A" * 86, trail])
    result = verify_chain(trail)
    assert not result.ok
    assert "checkpoint at seq 20: signature does not verify" in result.problems[0]


def test_the_offline_verifier_names_an_event_changed_inside_the_bundle(trail, tenant, tmp_path):
    bundle = export_bundle(tenant, tmp_path / "bundle.zip")
    forged = tmp_path / "forged.zip"
    with zipfile.ZipFile(bundle) as source, zipfile.ZipFile(forged, "w") as target:
        for item in source.infolist():
            content = source.read(item.filename)
            if item.filename == "events.jsonl":
                content = content.replace(b'"tx-1"', b'"tx-2"', 1)
            target.writestr(item, content)
    result = verify_bundle(forged)
    assert not result.ok
    assert any("content does not match its hash" in p for p in result.problems)
    assert any("events.jsonl: its sha256 differs" in p for p in result.problems)


# The trigger's refusal, or (TRUNCATE of a table others point at) PostgreSQL's own before it.
REFUSED = "append-only|referenced in a foreign key|pending trigger events"


@pytest.mark.postgres
@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the append-only trigger exists on PostgreSQL only"
)
@pytest.mark.parametrize(
    "table", ["audit_auditevent", "audit_auditseal", "audit_checkpoint", "audit_publickey"]
)
def test_the_applications_update_delete_and_truncate_on_audit_tables_fail_on_postgresql(trail, table):
    column = "kid" if table == "audit_publickey" else "chain"
    before = raw(f"SELECT count(*) FROM {table}")[0][0]  # noqa: S608 (a fixed table name)
    assert before > 0
    for statement in (f"UPDATE {table} SET {column} = {column}", f"DELETE FROM {table}", f"TRUNCATE {table}"):
        with (
            pytest.raises(DatabaseError, match=REFUSED),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(statement)
    assert raw(f"SELECT count(*) FROM {table}")[0][0] == before  # noqa: S608
    assert verify_chain(trail).ok


def test_the_models_refuse_update_and_delete(trail):
    from audit.models import AppendOnlyError

    event = AuditEvent.objects.filter(chain=trail).first()
    event.actor = "someone else"
    with pytest.raises(AppendOnlyError):
        event.save()
    with pytest.raises(AppendOnlyError):
        event.delete()
    with pytest.raises(AppendOnlyError):
        AuditEvent.objects.filter(chain=trail).update(actor="x")
    with pytest.raises(AppendOnlyError):
        AuditEvent.objects.filter(chain=trail).delete()
    with pytest.raises(AppendOnlyError):
        Checkpoint.objects.filter(chain=trail).delete()
    assert ChainHead.objects.get(chain=trail).seq == 34
