"""The two PostgreSQL roles: connected as the application role, the audit trail
cannot be changed, removed or unprotected, and the application still works (services write, the
sequencer chains, verification passes)."""

import uuid
from contextlib import contextmanager
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction

from audit.chain.verification import verify_chain
from audit.models import AuditEvent, ChainHead
from tests.audit.util import lifecycle

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="database roles are PostgreSQL's"),
    pytest.mark.django_db(transaction=True),
]


@contextmanager
def connected_as(role: str):
    """Django's connection as another role, for the length of the block. With the connection pool
    (reviewer/settings.py) a closed connection goes back to a pool opened as the first role, so the pool
    is closed too, and opened again with the role's credentials."""
    _close_connection_and_pool()
    saved = connection.settings_dict["USER"], connection.settings_dict["PASSWORD"]
    connection.settings_dict["USER"], connection.settings_dict["PASSWORD"] = role, ""
    try:
        yield
    finally:
        _close_connection_and_pool()
        connection.settings_dict["USER"], connection.settings_dict["PASSWORD"] = saved


def _close_connection_and_pool():
    connection.close()
    connection.close_pool()


@pytest.fixture
def roles():
    """An owner and an application role made by the command, dropped afterwards (roles are
    cluster-wide: the names are unique to this run)."""
    suffix = uuid.uuid4().hex[:8]
    owner, app = f"reviewer_owner_{suffix}", f"reviewer_app_{suffix}"
    out = StringIO()
    call_command("setup_database_roles", "--owner", owner, "--app", app, stdout=out)
    call_command("setup_database_roles", "--owner", owner, "--app", app, stdout=StringIO())  # idempotent
    yield owner, app, out.getvalue()
    connection.close()
    with connection.cursor() as cursor:
        for role in (app, owner):
            cursor.execute(f'REASSIGN OWNED BY "{role}" TO CURRENT_USER')
            cursor.execute(f'DROP OWNED BY "{role}"')
            cursor.execute(f'DROP ROLE "{role}"')


THIRD = "(SELECT event_id FROM audit_auditseal WHERE chain = %(chain)s AND seq = 3)"
LAST = "(SELECT max(seq) FROM audit_auditseal WHERE chain = %(chain)s)"
LAST_HASH = f"(SELECT hash FROM audit_auditseal WHERE chain = %(chain)s AND seq = {LAST})"
NEW_EVENT = (
    "INSERT INTO audit_auditevent (chain, at, actor, verb, subject, data) "
    "VALUES (%(chain)s, now(), 'system', 'halt.started', 'x', '{}'::jsonb) RETURNING id"
)
ATTACKS = [
    # An event arrives unchained: it has no seq or hash of its own to forge (its seal is the sequencer's).
    (
        "INSERT INTO audit_auditevent (chain, at, actor, verb, subject, data, seq, prev_hash, hash) "
        "VALUES (%(chain)s, now(), 'system', 'halt.started', 'x', '{}'::jsonb, 1, 'a', 'b')",
        'column "seq" of relation "audit_auditevent" does not exist',
    ),
    (f"UPDATE audit_auditevent SET data = '{{}}'::jsonb WHERE id = {THIRD}", "permission denied"),
    (
        f"UPDATE audit_auditseal SET hash = 'sha256:' || repeat('1', 64) WHERE event_id = {THIRD}",
        "permission denied",
    ),
    ("DELETE FROM audit_auditevent WHERE chain = %(chain)s", "permission denied"),
    ("TRUNCATE audit_auditevent", "permission denied"),
    ("DELETE FROM audit_auditseal WHERE chain = %(chain)s", "permission denied"),
    ("TRUNCATE audit_auditseal", "permission denied"),
    # The mark says the pending rows are complete: deleting it would ask for a scan of the whole trail.
    ("DELETE FROM audit_auditpendingmark", "permission denied"),
    ("TRUNCATE audit_auditpendingmark", "permission denied"),
    # A seal must continue its chain: not a second seq 3, not a gap, not a fork off an older hash.
    (
        f"WITH e AS ({NEW_EVENT}) INSERT INTO audit_auditseal (event_id, chain, seq, prev_hash, hash) "
        f"SELECT id, %(chain)s, {LAST} + 2, {LAST_HASH}, 'sha256:' || repeat('2', 64) FROM e",
        "does not continue the chain",
    ),
    (
        f"WITH e AS ({NEW_EVENT}) INSERT INTO audit_auditseal (event_id, chain, seq, prev_hash, hash) "
        f"SELECT id, %(chain)s, {LAST} + 1, 'sha256:' || repeat('3', 64), {LAST_HASH} FROM e",
        "does not continue the chain",
    ),
    (
        f"WITH e AS ({NEW_EVENT}) INSERT INTO audit_auditseal (event_id, chain, seq, prev_hash, hash) "
        f"SELECT id, 'tenant:0', 1, 'sha256:' || repeat('0', 64), 'sha256:' || repeat('2', 64) FROM e",
        "is not on chain",
    ),
    ("DELETE FROM audit_checkpoint", "permission denied"),
    ("TRUNCATE audit_checkpoint", "permission denied"),
    ("DELETE FROM audit_chainhead", "permission denied"),
    ("UPDATE audit_chainhead SET seq = 1 WHERE chain = %(chain)s", "only moves forward"),
    ("ALTER TABLE audit_auditseal DISABLE TRIGGER audit_auditseal_continues_chain", "must be owner"),
    ("ALTER TABLE audit_auditevent DISABLE TRIGGER ALL", "must be owner"),
    ("DROP TRIGGER audit_auditseal_append_only ON audit_auditseal", "must be owner"),
    ("DROP TRIGGER audit_chainhead_moves_forward ON audit_chainhead", "must be owner"),
    ("ALTER TABLE audit_auditevent ADD COLUMN note text", "must be owner"),
    ("DROP TABLE audit_auditevent", "must be owner"),
    ("SET session_replication_role = replica", "permission denied"),
]


def test_the_app_role_works_but_cannot_change_remove_or_unprotect_the_audit_trail(
    roles, agent, refund_policy, requester, reviewer_a
):
    owner, app, printed = roles
    assert f'CREATE ROLE "{app}" LOGIN' in printed
    assert f'GRANT SELECT, INSERT ON TABLE "public"."audit_auditseal" TO "{app}"' in printed
    assert f'GRANT UPDATE ("seq", "hash") ON TABLE "public"."audit_chainhead" TO "{app}"' in printed
    chain = f"tenant:{agent.tenant_id}"
    with connected_as(app):
        lifecycle(agent, reviewer_a)  # services write, commit, and the on-commit sequencer chains, as app
        assert not AuditEvent.objects.filter(chain=chain, seq__isnull=True).exists()
        head = ChainHead.objects.get(chain=chain)
        assert head.seq == AuditEvent.objects.filter(chain=chain).count() > 5
        assert verify_chain(chain).ok
        refused = []
        for statement, reason in ATTACKS:
            with pytest.raises(DatabaseError) as error, transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(statement, {"chain": chain})
            assert reason in str(error.value), (statement, str(error.value))
            refused.append(statement)
        assert len(refused) == len(ATTACKS)
        assert verify_chain(chain).ok
