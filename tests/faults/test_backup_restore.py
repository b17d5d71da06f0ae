"""Backup and restore, rehearsed on PostgreSQL (a private server, tests/faults/servers.py), as
docs/backup-and-restore.md tells an operator to do it: `pg_dump -Fc` of the database, a copy of the
signing key folder, and the audit checkpoint folder shipped elsewhere; later `pg_restore` into an empty
database, the keys put back, `manage.py audit_verify --checkpoints <shipped copy>`.

What must hold after the restore: the chain verifies against the checkpoints outside the database up to
the backup, with keys restored from the key backup; decisions already delivered are not delivered
again; decisions made after the backup are gone and the verifier says so (the trail ends before the
last checkpoint the files hold). Agents' continuations are sent to an address where nothing listens:
a delivery attempt would show as a claim (attempts) and an `outbox.failed` event.
"""

import shutil
import subprocess
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

import signing_keys as keys
from accounts.stepup import SESSION, StepUp
from approvals.models import Decision, OutboxMessage, Proposal
from approvals.services.decisions import consume_decision
from approvals.services.outbox import claim_outbox_message, mark_outbox_delivered
from approvals.services.votes import cast_vote
from approvals.states import State
from approvals.worker.loop import Worker
from audit.chain.verification import verify_chain
from audit.models import AuditEvent, Verb
from lib.errors import ConsumeRefused
from tests import factories
from tests.examples.harness import free_port
from tests.faults.servers import postgres_bin


def approve_and_deliver(agent, reviewer, order: str) -> Proposal:
    """A proposal approved, and its continuation delivered as the worker records it (claim, then
    delivered): the state a backup finds for a decision the agent already has."""
    proposal = factories.submit(agent, action=factories.refund_action(order_id=order))
    cast_vote(
        proposal.id,
        reviewer,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=StepUp(SESSION, timezone.now()),
    )
    message = OutboxMessage.objects.get(proposal=proposal, kind=OutboxMessage.Kind.CONTINUE)
    assert claim_outbox_message(message.id) is not None
    assert mark_outbox_delivered(message.id, note="accepted")
    return proposal


@pytest.mark.database_independent  # on its private PostgreSQL
def test_a_restored_database_verifies_redelivers_nothing_and_names_what_it_lost(
    on_private_database, private_postgres, settings, tmp_path
):
    database_url = on_private_database()
    settings.AUDIT_CHECKPOINT_EVERY = 5  # several checkpoints in the files, on both sides of the backup
    shipped = tmp_path / "shipped-checkpoints"  # the folder the operator ships off the database host
    settings.AUDIT_CHECKPOINT_DIR = shipped
    tenant = factories.make_tenant()
    reviewer = factories.make_user("reviewer_a", tenant=tenant, groups=["finance"])
    factories.make_policy(tenant, "refunds", thresholds=[{"group": "finance", "count": 1}], step_up="3600")
    nowhere = f"http://127.0.0.1:{free_port()}/.well-known/agent-card.json"
    agent = factories.make_agent(tenant, card_url=nowhere)
    chain = f"tenant:{tenant.id}"

    before = [approve_and_deliver(agent, reviewer, f"B{n}") for n in range(3)]
    call_command("audit_checkpoint", "--chain", chain, stdout=StringIO())

    # The backup: the database, and the key folder (the keys are files, never rows).
    dump = tmp_path / "reviewer.dump"
    subprocess.run([postgres_bin("pg_dump"), "-Fc", "-f", str(dump), database_url], check=True)
    key_backup = tmp_path / "keys-backup"
    shutil.copytree(settings.SIGNING_KEY_DIR, key_backup)
    backed_up_head = AuditEvent.objects.chained(chain).order_by("-seq").values_list("seq", flat=True)[0]

    after = [approve_and_deliver(agent, reviewer, f"A{n}") for n in range(2)]
    call_command("audit_checkpoint", "--chain", chain, stdout=StringIO())
    last_shipped = AuditEvent.objects.chained(chain).order_by("-seq").values_list("seq", flat=True)[0]
    assert last_shipped > backed_up_head

    # The disaster: the database and the keys are gone; restore both into new, empty places.
    restored_url = private_postgres.create_database("reviewer_restored")
    subprocess.run(
        [postgres_bin("pg_restore"), "--no-owner", "--exit-on-error", "-d", restored_url, str(dump)],
        check=True,
    )
    settings.SIGNING_KEY_DIR = tmp_path / "keys-restored"
    shutil.copytree(key_backup, settings.SIGNING_KEY_DIR)
    on_private_database(restored_url, migrate=False)

    # The chain verifies against the shipped checkpoints and the restored keys up to the backup, and
    # the verifier names what is missing: everything after the backup.
    result = verify_chain(chain, keys.jwks(), checkpoint_source=shipped)
    assert not result.ok
    assert result.first_bad_seq == backed_up_head + 1
    (problem,) = result.problems
    assert f"holds this chain up to seq {last_shipped}, now it ends at {backed_up_head}" in problem
    out = StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("audit_verify", "--chain", chain, "--checkpoints", str(shipped), stdout=out)
    assert failed.value.returncode == 1
    assert f"{chain}: FAILED, first bad event: seq {backed_up_head + 1}" in out.getvalue()

    # What was delivered before the backup is not delivered again; what came after is not there.
    assert Proposal.objects.filter(pk__in=[p.pk for p in after]).count() == 0
    events_before = AuditEvent.objects.count()
    report = Worker().tick()
    assert (report.delivered, report.failed, report.dead) == (0, 0, 0)
    continuations = OutboxMessage.objects.filter(proposal__in=before, kind=OutboxMessage.Kind.CONTINUE)
    assert sorted(continuations.values_list("status", "attempts")) == [("delivered", 1)] * 3
    assert not AuditEvent.objects.filter(verb=Verb.OUTBOX_FAILED).exists()
    assert AuditEvent.objects.count() == events_before  # the tick wrote nothing

    # The decisions still verify with the restored key: the same key signed them.
    published = {key["kid"] for key in keys.jwks()["keys"]}
    assert {d.kid for d in Decision.objects.filter(proposal__in=before)} <= published


def test_audit_verify_refuses_a_checkpoint_folder_that_is_not_there(db, tmp_path):
    """A wrong --checkpoints path must not verify against nothing and report OK."""
    missing = tmp_path / "not-shipped"
    out = StringIO()
    with pytest.raises(CommandError, match=f"no checkpoint files at {missing}"):
        call_command("audit_verify", "--checkpoints", str(missing), stdout=out)
    assert out.getvalue() == ""


@pytest.mark.database_independent  # on its private PostgreSQL
def test_a_decision_consumed_after_the_backup_is_never_consumed_again_once_the_restore_is_fenced(
    on_private_database, private_postgres, settings, tmp_path
):
    """The backup holds a released, unconsumed decision; the agent consumes it after the backup; the
    database is restored. Its token still verifies, and the restored row says unconsumed: without the
    fence a second consume would be granted. `manage.py fence_restored_decisions`, run as the procedure
    says before the servers start, revokes it: the consume is refused and CancelTask is queued."""
    database_url = on_private_database()
    settings.AUDIT_CHECKPOINT_DIR = tmp_path / "checkpoints"
    tenant = factories.make_tenant()
    reviewer = factories.make_user("reviewer_a", tenant=tenant, groups=["finance"])
    factories.make_policy(tenant, "refunds", thresholds=[{"group": "finance", "count": 1}], step_up="3600")
    agent = factories.make_agent(
        tenant, card_url=f"http://127.0.0.1:{free_port()}/.well-known/agent-card.json"
    )
    released = approve_and_deliver(agent, reviewer, "F1")
    consumed_before = approve_and_deliver(agent, reviewer, "F2")
    first = Decision.objects.get(proposal=consumed_before)
    consume_decision(agent, first.jti, rev=first.rev)  # consumed before the backup: stays consumed

    dump = tmp_path / "reviewer.dump"
    subprocess.run([postgres_bin("pg_dump"), "-Fc", "-f", str(dump), database_url], check=True)
    decision = Decision.objects.get(proposal=released)
    consume_decision(agent, decision.jti, rev=decision.rev)  # after the backup: the agent acted on it

    restored_url = private_postgres.create_database("reviewer_fenced")
    subprocess.run(
        [postgres_bin("pg_restore"), "--no-owner", "--exit-on-error", "-d", restored_url, str(dump)],
        check=True,
    )
    on_private_database(restored_url, migrate=False)
    assert Proposal.objects.get(pk=released.pk).state == State.APPROVED  # consumable again, unfenced

    out = StringIO()
    call_command("fence_restored_decisions", stdout=out)

    assert "1 released, unconsumed decision(s) revoked" in out.getvalue()
    with pytest.raises(ConsumeRefused) as refused:
        consume_decision(agent, decision.jti, rev=decision.rev)
    assert refused.value.code == "revoked"
    assert Proposal.objects.get(pk=consumed_before.pk).state == State.EXECUTING  # untouched
    assert OutboxMessage.objects.filter(proposal=released, kind=OutboxMessage.Kind.CANCEL).exists()
    assert AuditEvent.objects.filter(verb=Verb.DECISION_REVOKED, data__jti=str(decision.jti)).exists()
