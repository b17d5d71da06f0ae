"""A seal the sequencer did not write cannot wedge a chain: it is refused when the sequencer has its own
database role, adopted and named by audit_verify when it does not, and audit_verify never answers a bad
trail with a traceback."""

import os
import subprocess
import sys
import uuid
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction

from audit.chain.sequencer import sequence_pending
from audit.chain.verification import verify_chain
from audit.models import AuditEvent, AuditPending, AuditSeal, ChainHead
from tests.audit.test_database_roles import connected_as
from tests.audit.util import ROOT, lifecycle
from tests.factories import submit

MADE_UP = "sha256:" + "e" * 64
# One event and its seal at the chain's next seq, continuing the chain (so the trigger lets it through)
# with a hash its event does not have: what the application's role could insert before it had no INSERT
# on seals.
FOREIGN_SEAL = (
    "WITH e AS (INSERT INTO audit_auditevent (chain, at, actor, verb, subject, data) "
    "VALUES (%(chain)s, now(), 'system', 'halt.started', 'x', '{}'::jsonb) RETURNING id) "
    "INSERT INTO audit_auditseal (event_id, chain, seq, prev_hash, hash) "
    "SELECT id, %(chain)s, h.seq + 1, h.hash, %(hash)s FROM e, audit_chainhead h WHERE h.chain = %(chain)s"
)


def audit_verify(chain: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("audit_verify", "--chain", chain, stdout=out)
    except CommandError as error:
        return error.returncode, out.getvalue()
    return 0, out.getvalue()


@pytest.fixture
def roles():
    """An owner, an application and a sequencer role made by the command, dropped afterwards."""
    suffix = uuid.uuid4().hex[:8]
    names = {"owner": f"rv_owner_{suffix}", "app": f"rv_app_{suffix}", "sequencer": f"rv_seq_{suffix}"}
    out = StringIO()
    call_command(
        "setup_database_roles",
        *("--owner", names["owner"], "--app", names["app"], "--sequencer", names["sequencer"]),
        stdout=out,
    )
    yield names, out.getvalue()
    connection.close()
    with connection.cursor() as cursor:
        for role in (names["sequencer"], names["app"], names["owner"]):
            cursor.execute(f'REASSIGN OWNED BY "{role}" TO CURRENT_USER')
            cursor.execute(f'DROP OWNED BY "{role}"')
            cursor.execute(f'DROP ROLE "{role}"')


@pytest.fixture
def two_roles():
    """Owner and application role only: the application role inserts seals (the sequencer runs as it)."""
    suffix = uuid.uuid4().hex[:8]
    owner, app = f"rv_owner_{suffix}", f"rv_app_{suffix}"
    call_command("setup_database_roles", "--owner", owner, "--app", app, stdout=StringIO())
    yield app
    connection.close()
    with connection.cursor() as cursor:
        for role in (app, owner):
            cursor.execute(f'REASSIGN OWNED BY "{role}" TO CURRENT_USER')
            cursor.execute(f'DROP OWNED BY "{role}"')
            cursor.execute(f'DROP ROLE "{role}"')


@pytest.mark.django_db
def test_a_seal_past_the_head_is_adopted_later_events_are_chained_and_verify_names_it(
    agent, refund_policy, requester, reviewer_a
):
    proposal = lifecycle(agent, reviewer_a)
    chain = f"tenant:{agent.tenant_id}"
    head = ChainHead.objects.get(chain=chain)
    stray = AuditEvent.objects.create(
        chain=chain, at=proposal.created_at, actor="system", verb="halt.started"
    )
    AuditSeal.objects.create(event=stray, chain=chain, seq=head.seq + 1, prev_hash=head.hash, hash=MADE_UP)
    submit(agent, task_id="task-after-the-stray-seal")

    sequence_pending()

    assert not AuditPending.objects.filter(chain=chain).exists()  # nothing left waiting behind it
    assert ChainHead.objects.get(chain=chain).seq > head.seq + 1
    result = verify_chain(chain)
    assert not result.ok and result.first_bad_seq == head.seq + 1
    status, printed = audit_verify(chain)
    assert status == 1
    assert f"{chain}: FAILED, first bad event: seq {head.seq + 1}" in printed


@pytest.mark.postgres
@pytest.mark.skipif(connection.vendor != "postgresql", reason="database roles are PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_the_app_roles_seal_at_the_next_seq_no_longer_wedges_the_chain(
    two_roles, agent, refund_policy, requester, reviewer_a
):
    chain = f"tenant:{agent.tenant_id}"
    with connected_as(two_roles):
        lifecycle(agent, reviewer_a)
        wedge_at = ChainHead.objects.get(chain=chain).seq + 1
        with connection.cursor() as cursor:
            cursor.execute(FOREIGN_SEAL, {"chain": chain, "hash": MADE_UP})
        submit(agent, task_id="task-after-the-wedge")  # its commit runs the sequencer, as the app role
        sequence_pending()  # the worker's tick

        assert not AuditPending.objects.filter(chain=chain).exists()
        assert ChainHead.objects.get(chain=chain).seq > wedge_at
        status, printed = audit_verify(chain)
    assert status == 1
    assert f"{chain}: FAILED, first bad event: seq {wedge_at}" in printed
    assert f"{chain} event {wedge_at}: content does not match its hash" in printed


@pytest.mark.postgres
@pytest.mark.skipif(connection.vendor != "postgresql", reason="database roles are PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_with_a_sequencer_role_the_app_role_cannot_seal_and_the_sequencer_chains(
    roles, agent, refund_policy, requester, reviewer_a
):
    names, printed = roles
    assert f'GRANT SELECT ON TABLE "public"."audit_auditseal" TO "{names["app"]}"' in printed
    assert f'GRANT SELECT, INSERT ON TABLE "public"."audit_auditseal" TO "{names["sequencer"]}"' in printed
    chain = f"tenant:{agent.tenant_id}"
    with connected_as(names["app"]):
        submit(agent)  # accepted as the app role; its after-commit sequencing is refused, and logged
        assert AuditPending.objects.filter(chain=chain).exists()
        for statement, reason in [
            (FOREIGN_SEAL, "permission denied for table audit_auditseal"),
            ("UPDATE audit_chainhead SET seq = seq WHERE chain = %(chain)s", "permission denied"),
            ("DELETE FROM audit_auditpending WHERE chain = %(chain)s", "permission denied"),
        ]:
            with pytest.raises(DatabaseError) as error, transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(statement, {"chain": chain, "hash": MADE_UP})
            assert reason in str(error.value), statement
    with connected_as(names["sequencer"]):
        assert sequence_pending() > 0
    assert not AuditPending.objects.filter(chain=chain).exists()
    assert verify_chain(chain).ok


@pytest.mark.postgres
@pytest.mark.skipif(connection.vendor != "postgresql", reason="database roles are PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_the_worker_seals_as_the_sequencer_role_through_its_own_connection(
    roles, agent, refund_policy, requester, tmp_path, settings
):
    names, _ = roles
    chain = f"tenant:{agent.tenant_id}"
    with connected_as(names["app"]):
        submit(agent)
    assert AuditPending.objects.filter(chain=chain).exists()
    db = connection.settings_dict
    url = "postgres://{user}@{host}:{port}/{name}"
    where = {"host": db["HOST"] or "127.0.0.1", "port": db["PORT"] or 5432, "name": db["NAME"]}
    env = {
        **os.environ,
        "DATABASE_URL": url.format(user=names["app"], **where),
        "AUDIT_SEQUENCER_DATABASE_URL": url.format(user=names["sequencer"], **where),
        "REVIEWER_DATA_DIR": str(tmp_path / "data"),
        "REVIEWER_SIGNING_KEY_DIR": str(settings.SIGNING_KEY_DIR),
        "AUDIT_CHECKPOINT_DIR": str(settings.AUDIT_CHECKPOINT_DIR),
        "DEBUG": "true",
    }
    for name in ("REVIEWER_SIGNING_KEY", "REVIEWER_SIGNING_KEY_FILE", "DJANGO_SETTINGS_MODULE"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "manage.py", "run_worker", "--once"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert not AuditPending.objects.filter(chain=chain).exists()
    assert verify_chain(chain).ok
