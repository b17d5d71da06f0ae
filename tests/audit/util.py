"""Plain helpers for the audit tests."""

import json
import os
import subprocess
import sys
from pathlib import Path

from django.db import connection

from accounts.stepup import step_up_for
from approvals.services.decisions import consume_decision, record_outcome
from approvals.services.votes import cast_vote
from audit.chain.sequencer import sequence_pending
from audit.exports.bundles import write_bundle
from audit.exports.lines import Selection
from tenants import queries as tenant_queries
from tests.factories import submit, totp_code, verified_client  # noqa: F401 (audit tests import it from here)

ROOT = Path(__file__).resolve().parents[2]


def tenant_ref(tenant) -> tenant_queries.TenantRef:
    return tenant_queries.tenant_by_id(tenant.id)


def lifecycle(agent, voter, *, outcome="succeeded", verdict="approve", **submit_kwargs):
    """Submit, vote, and (when approved) consume and report the outcome: about ten events, chained.

    Each service's transaction is a savepoint of the test's transaction here, so the sequencer's
    on-commit hook never fires: the lifecycle ends with what the worker's tick does."""
    proposal = submit(agent, **submit_kwargs)
    cast_vote(
        proposal.id,
        voter,
        verdict=verdict,
        digest_seen=proposal.action_digest,
        step_up=step_up_for(voter, totp_code(voter)),
        reason="" if verdict == "approve" else "not this one",
        page_hash="sha256:" + "ab" * 32,
    )
    proposal.refresh_from_db()
    if verdict == "approve" and outcome:
        consume_decision(agent, proposal.decision.jti, rev=proposal.decision.rev)
        record_outcome(agent, proposal.decision.jti, status=outcome, transaction_id="tx-1")
        proposal.refresh_from_db()
    sequence_pending()
    return proposal


def raw(sql: str, params=()) -> list:
    """SQL that bypasses the models; on PostgreSQL with the append-only trigger switched off (as the
    superuser the tests connect as), the way someone with database access would tamper."""
    postgres = connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        if postgres:
            cursor.execute("SET session_replication_role = replica")
        try:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else []
        finally:
            if postgres:
                cursor.execute("SET session_replication_role = origin")


EVENT_AT = "SELECT event_id FROM audit_auditseal WHERE chain = %s AND seq = %s"


def stored_data(chain: str, seq: int) -> str:
    cast = "::text" if connection.vendor == "postgresql" else ""
    return raw(f"SELECT data{cast} FROM audit_auditevent WHERE id = ({EVENT_AT})", [chain, seq])[0][0]  # noqa: S608


def change_one_byte(chain: str, seq: int, old: str, new: str) -> None:
    text = stored_data(chain, seq)
    assert old in text and len(old) == len(new)
    changed = text.replace(old, new, 1)
    json.loads(changed)
    cast = "::jsonb" if connection.vendor == "postgresql" else ""
    raw(f"UPDATE audit_auditevent SET data = %s{cast} WHERE id = ({EVENT_AT})", [changed, chain, seq])  # noqa: S608


def swap(chain: str, seq_a: int, seq_b: int) -> None:
    parking = 10**12
    raw("UPDATE audit_auditseal SET seq = %s WHERE chain = %s AND seq = %s", [parking, chain, seq_a])
    raw("UPDATE audit_auditseal SET seq = %s WHERE chain = %s AND seq = %s", [seq_a, chain, seq_b])
    raw("UPDATE audit_auditseal SET seq = %s WHERE chain = %s AND seq = %s", [seq_b, chain, parking])


def delete_events(chain: str, after_seq: int = 0) -> None:
    """Remove the chain's events after `after_seq` (all of them by default), seals and all."""
    doomed = "SELECT event_id FROM audit_auditseal WHERE chain = %s AND seq > %s"
    raw(f"DELETE FROM audit_auditpending WHERE event_id IN ({doomed})", [chain, after_seq])  # noqa: S608
    ids = [row[0] for row in raw(doomed, [chain, after_seq])]
    raw("DELETE FROM audit_auditseal WHERE chain = %s AND seq > %s", [chain, after_seq])
    for event_id in ids:
        raw("DELETE FROM audit_auditevent WHERE id = %s", [event_id])


def export_bundle(tenant, path: Path, **filters) -> Path:
    for _ in write_bundle(Selection.for_tenant(tenant_ref(tenant), filters), path, created_by="test"):
        pass
    return path


def verify_offline(*args) -> subprocess.CompletedProcess:
    """`python -m audit.verify ...` in a fresh interpreter with no Django settings in its environment."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")
    }
    return subprocess.run(
        [sys.executable, "-m", "audit.verify", *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def rewrite_from(chain: str, first_seq: int, change, *, every: bool = False) -> None:
    """Change the event at `first_seq` (or every event from there on) with `change(data) -> data` and
    recompute every hash after it, as someone with database access could."""
    from audit.models import AuditEvent
    from audit.shapes import event_body
    from audit.verify.hashing import hash_body

    cast = "::jsonb" if connection.vendor == "postgresql" else ""
    prev_hash = AuditEvent.objects.get(chain=chain, seq=first_seq - 1).hash
    for event in AuditEvent.objects.filter(chain=chain, seq__gte=first_seq).order_by("seq"):
        data = change(event.data) if every or event.seq == first_seq else event.data
        new_hash = hash_body(
            event_body(chain, event.seq, event.at, event.actor, event.verb, event.subject, data, prev_hash)
        )
        raw(f"UPDATE audit_auditevent SET data = %s{cast} WHERE id = %s", [json.dumps(data), event.id])  # noqa: S608
        raw(
            "UPDATE audit_auditseal SET prev_hash = %s, hash = %s WHERE chain = %s AND seq = %s",
            [prev_hash, new_hash, chain, event.seq],
        )
        prev_hash = new_hash
    raw("UPDATE audit_chainhead SET hash = %s WHERE chain = %s", [prev_hash, chain])
