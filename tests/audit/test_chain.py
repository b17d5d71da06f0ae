"""The chain records what happened without secrets; checkpoints sign its head every N events and every
T minutes, and stay verifiable after the signing key is rotated away."""

import contextlib
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, transaction

import signing_keys as keys
from accounts.stepup import step_up_for
from approvals.services.agents import rotate_signing_key
from approvals.services.votes import cast_vote
from audit.chain.accept import append
from audit.chain.checkpoints import checkpoint_head, write_due_checkpoints
from audit.chain.sequencer import sequence_pending
from audit.chain.verification import verify_chain
from audit.models import (
    AuditEvent,
    AuditPending,
    AuditPendingMark,
    ChainHead,
    Checkpoint,
    PublicKey,
    Verb,
)
from lib.errors import VoteRefused
from tests.audit.util import lifecycle
from tests.factories import submit, trail_name

pytestmark = pytest.mark.django_db


@pytest.mark.django_db(transaction=True)
def test_append_outside_the_transaction_of_the_change_is_refused():
    with pytest.raises(RuntimeError, match="inside the transaction"):
        append("system", actor="system", verb=Verb.HALT_STARTED, subject="halt:1")


def test_a_verb_the_trail_does_not_know_is_refused_and_nothing_is_written():
    """The verb column has no choices (a new verb needs no migration): append checks it instead."""
    with pytest.raises(ValueError, match="unknown audit verb 'halt.begun'"), transaction.atomic():
        append("system", actor="system", verb="halt.begun", subject="halt:1")
    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize(
    "data",
    [
        {"otp_code": "123456"},
        {"nested": {"password": "x"}},
        {"list": [{"token": "eyJ..."}]},
        {"private_key": "-----BEGIN"},
    ],
)
def test_event_data_carrying_a_secret_is_refused(data):
    with pytest.raises(ValueError, match="never go into the audit log"), transaction.atomic():
        append("system", actor="system", verb=Verb.HALT_STARTED, subject="halt:1", data=data)
    assert not AuditEvent.objects.exists()


def _append_halt(data: dict) -> None:
    append("system", actor="system", verb=Verb.HALT_STARTED, subject="halt:1", data=data)


@pytest.mark.parametrize("number", [1e21, 2**53, -(2**60), float("inf")])
def test_event_data_with_a_number_json_does_not_keep_exactly_is_refused(number):
    """jsonb would store 1e21 as the integer 10**21, which RFC 8785 refuses to hash: stored, the event
    would stop its chain at the next sequencing. It is refused before anything is written."""
    with pytest.raises(ValueError, match=r"data.amounts\[1\]: .* outside the numbers JSON keeps exactly"):
        with transaction.atomic():
            _append_halt({"amounts": [1, number]})
    assert not AuditEvent.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_numbers_json_keeps_exactly_are_chained_and_verify_after_the_round_trip():
    with transaction.atomic():
        _append_halt({"n": [2**53 - 1, 2.5, -1e15]})
    sequence_pending()

    assert AuditEvent.objects.get().hash
    assert verify_chain("system").ok


def test_audit_events_hold_no_codes_tokens_or_private_keys(
    agent, refund_policy, requester, reviewer_a, reviewer_b
):
    from tests.factories import totp_code

    proposal = submit(agent)
    with pytest.raises(VoteRefused):
        cast_vote(
            proposal.id,
            reviewer_b,
            verdict="approve",
            digest_seen=proposal.action_digest,
            step_up=step_up_for(reviewer_b, "000000"),
        )
    code = totp_code(reviewer_a)
    cast_vote(
        proposal.id,
        reviewer_a,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer_a, code),
    )
    proposal.refresh_from_db()
    key_pem = next(keys._key_dir().glob("*.pem")).read_text()
    everything = "".join(str(e.data) + e.actor + e.subject for e in AuditEvent.objects.all())
    for secret in (
        code,
        "000000",
        "push-secret",
        "api-secret",
        proposal.decision.token,
        proposal.decision.token.split(".")[2],
        key_pem.splitlines()[1],
    ):
        assert secret not in everything
    assert AuditEvent.objects.filter(verb=Verb.STEP_UP_FAILED, actor=trail_name("reviewer_b")).exists()


def test_events_record_what_the_reviewer_saw_who_decided_how_the_policy_and_the_jti(
    agent, refund_policy, requester, reviewer_a
):
    proposal = lifecycle(agent, reviewer_a)
    events = {e.verb: e.data for e in AuditEvent.objects.filter(subject=f"proposal:{proposal.id}")}
    vote = events[Verb.VOTE_CAST]
    assert vote["digest_seen"] == proposal.action_digest
    assert vote["page_hash"].startswith("sha256:")
    assert vote["auth"]["method"] == "totp" and vote["groups"] == ["finance"]
    assert events[Verb.POLICY_EVALUATED]["policies"] == [{"id": "refunds", "version": 1}]
    assert events[Verb.DECISION_SIGNED]["jti"] == str(proposal.decision.jti)
    assert events[Verb.DECISION_CONSUMED]["jti"] == str(proposal.decision.jti)
    assert events[Verb.OUTCOME_RECORDED]["status"] == "succeeded"


def test_a_checkpoint_every_n_events_signs_the_head(agent, refund_policy, requester, reviewer_a, settings):
    settings.AUDIT_CHECKPOINT_EVERY = 5
    lifecycle(agent, reviewer_a)
    chain = f"tenant:{agent.tenant_id}"
    head = ChainHead.objects.get(chain=chain)
    assert list(Checkpoint.objects.filter(chain=chain).values_list("seq", flat=True)) == list(
        range(5, head.seq + 1, 5)
    )
    for checkpoint in Checkpoint.objects.filter(chain=chain):
        assert checkpoint.hash == AuditEvent.objects.get(chain=chain, seq=checkpoint.seq).hash
    assert verify_chain(chain).ok


def test_time_based_checkpoints_sign_only_moved_heads_whose_last_checkpoint_is_old(
    agent, refund_policy, settings
):
    settings.AUDIT_CHECKPOINT_EVERY = 1000
    sequence_pending()
    chain = f"tenant:{agent.tenant_id}"
    now = datetime.now(UTC)
    assert write_due_checkpoints(seconds=600) == []  # never signed, but its first event is seconds old
    later = now + timedelta(minutes=11)
    assert [c.seq for c in write_due_checkpoints(now=later, seconds=600)] == [
        ChainHead.objects.get(chain=chain).seq
    ]
    assert write_due_checkpoints(now=later, seconds=600) == []  # the head did not move

    submit(agent)
    sequence_pending()
    assert write_due_checkpoints(seconds=600) == []  # moved, but the last checkpoint is recent
    due = write_due_checkpoints(now=later + timedelta(minutes=11), seconds=600)
    assert [c.seq for c in due] == [ChainHead.objects.get(chain=chain).seq]
    assert verify_chain(chain).ok


def test_an_idle_worker_tick_writes_nothing(agent, refund_policy, django_assert_num_queries):
    from audit.exports.jobs import run_pending_exports

    sequence_pending()
    # the pending rows' mark, unsequenced chains, heads, checkpoints, first event, stale jobs, pending jobs
    with django_assert_num_queries(7) as captured:
        sequence_pending()
        run_pending_exports()
    assert not [q for q in captured.captured_queries if not q["sql"].lstrip().upper().startswith("SELECT")]


def test_checkpoints_stay_verifiable_after_the_signing_key_is_rotated_and_its_files_are_gone(
    agent, refund_policy, requester, reviewer_a, settings, tmp_path
):
    chain = f"tenant:{agent.tenant_id}"
    sequence_pending()
    old_kid = checkpoint_head(chain).kid
    assert PublicKey.objects.filter(kid=old_kid).exists()
    settings.SIGNING_KEY_DIR = tmp_path / "new-keys"  # the old key's files are lost; a new key signs from now
    lifecycle(agent, reviewer_a)
    new_kid = checkpoint_head(chain).kid
    assert new_kid != old_kid
    result = verify_chain(chain)
    assert result.ok, result.problems
    assert result.checkpoints == Checkpoint.objects.filter(chain=chain).count()


def test_audit_checkpoint_command_signs_every_moved_head(agent, refund_policy):
    sequence_pending()
    out = StringIO()
    call_command("audit_checkpoint", stdout=out)
    chain = f"tenant:{agent.tenant_id}"
    assert f"{chain}: head seq {ChainHead.objects.get(chain=chain).seq} signed" in out.getvalue()
    out = StringIO()
    call_command("audit_checkpoint", "--tenant", "acme", stdout=out)
    assert "signed" in out.getvalue()  # the existing checkpoint of this head


def test_audit_verify_without_a_tenant_checks_every_chain(agent, refund_policy, requester, reviewer_a):
    rotate_signing_key()  # an event on the system chain
    out = StringIO()
    call_command("audit_verify", stdout=out)
    assert "system: OK" in out.getvalue()
    assert f"tenant:{agent.tenant_id}: OK" in out.getvalue()


def test_the_events_of_one_transaction_are_chained_by_one_after_commit_hook(
    django_capture_on_commit_callbacks,
):
    with django_capture_on_commit_callbacks() as hooks, transaction.atomic():
        for n in range(3):
            append("system", actor="system", verb=Verb.HALT_STARTED, subject=f"halt:{n}")
        append("tenant:0", actor="system", verb=Verb.HALT_STARTED, subject="halt:other-chain")
    assert len(hooks) == 2  # one per chain


def test_a_rolled_back_savepoint_does_not_take_the_chain_hook_of_later_events(
    django_capture_on_commit_callbacks,
):
    with django_capture_on_commit_callbacks() as hooks, transaction.atomic():
        with contextlib.suppress(RuntimeError), transaction.atomic():
            append("system", actor="system", verb=Verb.HALT_STARTED, subject="halt:rolled-back")
            raise RuntimeError("roll this savepoint back")
        append("system", actor="system", verb=Verb.HALT_STARTED, subject="halt:kept")
    assert len(hooks) == 1


def test_pending_rows_an_emptied_queue_lost_are_restored_from_the_events_once(settings):
    """What PostgreSQL's crash recovery leaves of the UNLOGGED queue (tests/faults has the real crash):
    no pending rows and no mark. The next sequencer pass puts back a row for every unsealed event and
    chains it; with the mark back, a deleted pending row is no longer restored but reported."""
    settings.AUDIT_SEQUENCING = "worker"  # nothing chains at commit
    with transaction.atomic():
        append("tenant:lost", actor="system", verb=Verb.HALT_STARTED, subject="halt:1")
        append("tenant:lost", actor="system", verb=Verb.HALT_STARTED, subject="halt:2")
    AuditPending.objects.all().delete()
    AuditPendingMark.objects.all().delete()

    assert sequence_pending() == 2
    assert verify_chain("tenant:lost").ok
    assert AuditPendingMark.objects.exists()

    with transaction.atomic():
        append("tenant:lost", actor="system", verb=Verb.HALT_STARTED, subject="halt:3")
    AuditPending.objects.all().delete()  # taken out of the queue while the queue was whole: tampering
    assert sequence_pending() == 0
    assert "no longer waits to be" in verify_chain("tenant:lost").summary()


@pytest.mark.postgres
@pytest.mark.skipif(connection.vendor != "postgresql", reason="UNLOGGED is PostgreSQL's")
def test_the_pending_queue_and_its_mark_are_unlogged_and_the_trail_is_not():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, relpersistence FROM pg_class WHERE relkind = 'r' AND relname LIKE 'audit_%%'"
        )
        persistence = dict(cursor.fetchall())
    assert persistence.pop("audit_auditpending") == "u"
    assert persistence.pop("audit_auditpendingmark") == "u"
    assert set(persistence.values()) == {"p"}  # events, seals, heads, checkpoints: in the WAL
