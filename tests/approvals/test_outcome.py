"""Outcomes: the agent's report (or its task's terminal state) settles an execution. Reports are
idempotent; unknown settles to succeeded or failed only by the agent's word or its task state; nothing
is ever re-approved."""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from accounts.stepup import step_up_for
from approvals.models import Decision, OutboxMessage, PolicyVersion, Proposal
from approvals.services.decisions import consume_decision, record_outcome, revoke_decision
from approvals.services.lifecycle import transition
from approvals.services.reconcile import mark_unknown, settle_from_task_state
from approvals.services.votes import cast_vote
from approvals.states import IllegalTransition, State
from audit.chain.sequencer import sequence_pending
from audit.models import AuditEvent, Verb
from lib.errors import Conflict, ConsumeRefused, NotFound, ServiceError, VoteRefused
from tests import factories
from tests.concurrency import requires_postgres
from tests.factories import approve, submit, totp_code

pytestmark = pytest.mark.django_db


@pytest.fixture
def executing(agent, refund_policy, requester, reviewer_a) -> tuple[Proposal, Decision]:
    proposal, decision = approve(agent, reviewer_a)
    consume_decision(agent, decision.jti, rev=decision.rev)
    proposal.refresh_from_db()
    return proposal, decision


def transitions_of(proposal) -> list[tuple[str, str]]:
    sequence_pending()  # what the on-commit hook does outside the test's transaction
    events = AuditEvent.objects.filter(verb=Verb.PROPOSAL_TRANSITIONED, subject=f"proposal:{proposal.id}")
    return [(e.data["from"], e.data["to"]) for e in events.order_by("seq")]


@pytest.mark.parametrize("status", ["succeeded", "failed"])
def test_an_outcome_report_settles_the_execution(agent, executing, status):
    proposal, decision = executing

    record_outcome(agent, decision.jti, status=status, transaction_id="re_3Nx", detail="done by PSP")

    proposal.refresh_from_db()
    assert proposal.state == status
    assert proposal.transaction_id == "re_3Nx"
    assert proposal.outcome_detail == "done by PSP"
    assert proposal.settled_at is not None
    event = AuditEvent.objects.get(verb=Verb.OUTCOME_RECORDED)
    assert event.actor == f"agent:{agent.slug}"
    assert event.data["status"] == status
    assert event.data["idempotency_key"] == str(decision.jti)


def test_the_same_report_twice_is_recorded_once(agent, executing):
    proposal, decision = executing

    record_outcome(agent, decision.jti, status="succeeded", transaction_id="re_1")
    again = record_outcome(agent, decision.jti, status="succeeded", transaction_id="re_1", via="push")

    assert again.state == State.SUCCEEDED
    assert AuditEvent.objects.filter(verb=Verb.OUTCOME_RECORDED).count() == 1


def test_a_contradicting_report_after_settlement_is_refused(agent, executing):
    proposal, decision = executing
    record_outcome(agent, decision.jti, status="succeeded")

    with pytest.raises(Conflict) as refused:
        record_outcome(agent, decision.jti, status="failed")

    assert refused.value.code == "not_executing"
    proposal.refresh_from_db()
    assert proposal.state == State.SUCCEEDED


def test_unknown_then_the_agents_report_settles_it(agent, executing):
    proposal, decision = executing

    record_outcome(agent, decision.jti, status="unknown", detail="PSP timed out")
    record_outcome(agent, decision.jti, status="unknown")  # the same report again
    record_outcome(agent, decision.jti, status="succeeded", transaction_id="re_9")

    proposal.refresh_from_db()
    assert proposal.state == State.SUCCEEDED
    assert transitions_of(proposal)[-2:] == [("executing", "unknown"), ("unknown", "succeeded")]


def test_reconciliation_marks_a_silent_execution_unknown(executing):
    proposal, _ = executing

    mark_unknown(proposal.id, reason="no outcome for 10 minutes")

    proposal.refresh_from_db()
    assert proposal.state == State.UNKNOWN


def test_mark_unknown_leaves_settled_proposals_alone(agent, executing):
    proposal, decision = executing
    record_outcome(agent, decision.jti, status="failed")

    mark_unknown(proposal.id, reason="late sweep")

    proposal.refresh_from_db()
    assert proposal.state == State.FAILED


def test_a_completed_task_settles_an_unknown_execution_as_succeeded(executing):
    proposal, _ = executing
    mark_unknown(proposal.id, reason="no outcome")

    settle_from_task_state(proposal.id, task_state="TASK_STATE_COMPLETED")

    proposal.refresh_from_db()
    assert proposal.state == State.SUCCEEDED
    assert AuditEvent.objects.get(verb=Verb.OUTCOME_RECORDED).data["via"] == "task_state"


@pytest.mark.parametrize("task_state", ["TASK_STATE_FAILED", "TASK_STATE_REJECTED", "TASK_STATE_CANCELED"])
def test_a_task_that_ended_otherwise_leaves_an_unknown_execution_unknown(executing, task_state):
    # The agent said it could not tell whether the write happened; a failed task is no proof it did not,
    # and "failed" would invite a second, duplicate approval. Only the agent's own report settles it.
    proposal, _ = executing
    mark_unknown(proposal.id, reason="no outcome")

    settle_from_task_state(proposal.id, task_state=task_state)

    proposal.refresh_from_db()
    assert proposal.state == State.UNKNOWN


@pytest.mark.parametrize(
    "task_state, settled",
    [
        ("TASK_STATE_FAILED", State.FAILED),
        ("TASK_STATE_REJECTED", State.FAILED),
        ("TASK_STATE_CANCELED", State.UNKNOWN),
    ],
)
def test_the_task_state_settles_an_execution(executing, task_state, settled):
    proposal, _ = executing

    settle_from_task_state(proposal.id, task_state=task_state)

    proposal.refresh_from_db()
    assert proposal.state == settled


def test_a_task_still_working_settles_nothing(executing):
    proposal, _ = executing
    mark_unknown(proposal.id, reason="no outcome")

    settle_from_task_state(proposal.id, task_state="TASK_STATE_WORKING")

    proposal.refresh_from_db()
    assert proposal.state == State.UNKNOWN


def test_unknown_is_never_re_approved(agent, executing, reviewer_a, admin_user):
    proposal, decision = executing
    mark_unknown(proposal.id, reason="no outcome")
    proposal.refresh_from_db()

    with pytest.raises(ConsumeRefused) as refused:
        consume_decision(agent, decision.jti, rev=decision.rev)
    assert refused.value.code == "consumed"
    with pytest.raises(VoteRefused) as vote_refused:
        cast_vote(
            proposal.id,
            reviewer_a,
            verdict="approve",
            digest_seen=proposal.action_digest,
            step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
        )
    assert vote_refused.value.code in {"not_open", "already_voted"}
    with pytest.raises(Conflict):
        revoke_decision(proposal.id, admin_user, reason="try again")
    for target in (State.APPROVED, State.EXECUTING, State.ALLOWED, State.AWAITING_REVIEW):
        with pytest.raises(IllegalTransition), transaction.atomic():
            transition(proposal, target, actor="system")
    proposal.refresh_from_db()
    assert proposal.state == State.UNKNOWN
    assert OutboxMessage.objects.filter(proposal=proposal, kind=OutboxMessage.Kind.CONTINUE).count() == 1


def test_an_outcome_without_a_consume_is_refused_when_consumption_is_required(
    agent, refund_policy, requester, reviewer_a
):
    proposal, decision = approve(agent, reviewer_a)

    with pytest.raises(Conflict) as refused:
        record_outcome(agent, decision.jti, status="succeeded")

    assert refused.value.code == "not_executing"
    proposal.refresh_from_db()
    assert proposal.state == State.APPROVED


def test_a_decision_without_online_consumption_passes_through_executing(tenant, agent, requester):
    factories.make_policy(
        tenant,
        "offline",
        outcome=PolicyVersion.Outcome.ALLOW,
        tool_pattern="payments.refund",
        consume_online=False,
    )
    proposal = submit(agent)
    decision = Decision.objects.get(proposal=proposal)
    assert decision.consume_required is False

    record_outcome(agent, decision.jti, status="succeeded", transaction_id="re_2")

    proposal.refresh_from_db()
    decision.refresh_from_db()
    assert proposal.state == State.SUCCEEDED
    assert decision.consumed_at is not None
    assert transitions_of(proposal)[-2:] == [("allowed", "executing"), ("executing", "succeeded")]


def test_an_outcome_for_a_revoked_decision_is_refused(agent, refund_policy, requester, reviewer_a):
    proposal, decision = approve(agent, reviewer_a)
    revoke_decision(proposal.id, reviewer_a, reason="withdrawn")

    with pytest.raises(Conflict):
        record_outcome(agent, decision.jti, status="succeeded")

    proposal.refresh_from_db()
    assert proposal.state == State.REVOKED


def test_an_unknown_status_is_refused(agent, executing):
    _, decision = executing

    with pytest.raises(ServiceError) as refused:
        record_outcome(agent, decision.jti, status="maybe")

    assert refused.value.code == "bad_status"
    assert refused.value.field == "status"


def test_another_agent_cannot_report_the_outcome(tenant, agent, executing):
    _, decision = executing
    other = factories.make_agent(tenant, "other-agent", push_token="p2", api_token="a2")

    with pytest.raises(NotFound):
        record_outcome(other, decision.jti, status="succeeded")


@pytest.mark.postgres
@requires_postgres
def test_an_outcome_report_is_its_lock_one_update_and_one_statement_of_audit_events(agent, executing):
    """The report's fields go in the transition's UPDATE and both its audit events (the transition and
    outcome.recorded) in one statement: three round trips, not five."""
    proposal, decision = executing

    with CaptureQueriesContext(connection) as captured:
        record_outcome(agent, decision.jti, status="succeeded", transaction_id="tx-9", detail="paid")

    sent = [q["sql"] for q in captured if not q["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))]
    assert len(sent) == 3, sent
    assert sent[1].startswith('UPDATE "approvals_proposal"') and '"transaction_id"' in sent[1]
    proposal.refresh_from_db()
    assert (proposal.state, proposal.transaction_id, proposal.outcome_detail) == (
        State.SUCCEEDED,
        "tx-9",
        "paid",
    )
    sequence_pending()
    verbs = list(
        AuditEvent.objects.filter(subject=f"proposal:{proposal.id}")
        .order_by("seq")
        .values_list("verb", flat=True)
    )
    assert verbs[-2:] == [Verb.PROPOSAL_TRANSITIONED, Verb.OUTCOME_RECORDED]
