"""Revocation: an approver or a tenant admin takes back a released, unconsumed decision (with a reason);
consumption fails from then on and the agent's task is sent CancelTask. After consumption only a
compensation note can be recorded."""

import pytest

from accounts.stepup import step_up_for
from approvals.models import OutboxMessage, PolicyVersion
from approvals.services.decisions import consume_decision, note_compensation, revoke_decision
from approvals.services.votes import cast_vote
from approvals.states import State
from audit.chain.verification import verify_chain
from audit.models import AuditEvent, Verb
from lib.errors import Conflict, ConsumeRefused, NotFound, RevokeRefused
from tests import factories
from tests.concurrency import requires_postgres, run_together
from tests.factories import approve, submit, totp_code, trail_name

pytestmark = pytest.mark.django_db


def test_approver_revokes_an_unconsumed_decision(agent, refund_policy, requester, reviewer_a):
    proposal, decision = approve(agent, reviewer_a)

    revoke_decision(proposal.id, reviewer_a, reason="the customer withdrew the request")

    proposal.refresh_from_db()
    decision.refresh_from_db()
    assert proposal.state == State.REVOKED
    assert decision.revoked_by == reviewer_a
    assert decision.revoke_reason == "the customer withdrew the request"
    assert decision.revoked_at is not None
    event = AuditEvent.objects.get(verb=Verb.DECISION_REVOKED)
    assert event.actor == trail_name("reviewer_a")
    assert event.data == {"jti": str(decision.jti), "reason": "the customer withdrew the request"}
    assert verify_chain(f"tenant:{proposal.tenant_id}").ok


def test_revocation_queues_cancel_task_for_the_released_task(agent, refund_policy, requester, reviewer_a):
    proposal, _ = approve(agent, reviewer_a)

    revoke_decision(proposal.id, reviewer_a, reason="wrong order")

    cancel = OutboxMessage.objects.get(proposal=proposal, kind=OutboxMessage.Kind.CANCEL)
    assert cancel.agent == agent
    assert cancel.message_id == f"cancel-{proposal.id}"
    assert cancel.status == OutboxMessage.Status.PENDING
    assert cancel.payload == {"reason": "wrong order"}


def test_consume_after_revocation_fails(agent, refund_policy, requester, reviewer_a):
    proposal, decision = approve(agent, reviewer_a)
    revoke_decision(proposal.id, reviewer_a, reason="fraud suspected")

    with pytest.raises(ConsumeRefused) as refused:
        consume_decision(agent, decision.jti, rev=decision.rev)

    assert refused.value.code == "revoked"
    proposal.refresh_from_db()
    assert proposal.state == State.REVOKED


def test_tenant_admin_can_revoke_a_decision_they_did_not_approve(
    agent, refund_policy, requester, reviewer_a, admin_user
):
    proposal, _ = approve(agent, reviewer_a)

    revoke_decision(proposal.id, admin_user, reason="incident INC-7")

    proposal.refresh_from_db()
    assert proposal.state == State.REVOKED


def test_admin_can_revoke_a_policy_allowed_decision(tenant, agent, requester, admin_user):
    factories.make_policy(
        tenant, "small-refunds", outcome=PolicyVersion.Outcome.ALLOW, tool_pattern="payments.refund"
    )
    proposal = submit(agent)
    assert proposal.state == State.ALLOWED

    revoke_decision(proposal.id, admin_user, reason="policy was too broad")

    proposal.refresh_from_db()
    assert proposal.state == State.REVOKED
    assert OutboxMessage.objects.filter(proposal=proposal, kind=OutboxMessage.Kind.CANCEL).count() == 1


@pytest.mark.parametrize("reason", ["", "   "])
def test_revocation_needs_a_reason(agent, refund_policy, requester, reviewer_a, reason):
    proposal, _ = approve(agent, reviewer_a)

    with pytest.raises(RevokeRefused) as refused:
        revoke_decision(proposal.id, reviewer_a, reason=reason)

    assert refused.value.code == "reason_required"
    assert refused.value.field == "reason"
    proposal.refresh_from_db()
    assert proposal.state == State.APPROVED


def test_reviewer_who_did_not_approve_cannot_revoke(agent, refund_policy, requester, reviewer_a, reviewer_b):
    proposal, _ = approve(agent, reviewer_a)

    with pytest.raises(RevokeRefused) as refused:
        revoke_decision(proposal.id, reviewer_b, reason="I disagree")

    assert refused.value.code == "not_eligible"
    proposal.refresh_from_db()
    assert proposal.state == State.APPROVED


def test_compliance_cannot_revoke(agent, refund_policy, requester, reviewer_a, compliance):
    proposal, _ = approve(agent, reviewer_a)

    with pytest.raises(RevokeRefused):
        revoke_decision(proposal.id, compliance, reason="looks odd")


def test_outsider_learns_nothing(agent, refund_policy, requester, reviewer_a, outsider):
    proposal, _ = approve(agent, reviewer_a)

    with pytest.raises(NotFound):
        revoke_decision(proposal.id, outsider, reason="mine now")


def test_revoke_after_consumption_is_refused(agent, refund_policy, requester, reviewer_a):
    proposal, decision = approve(agent, reviewer_a)
    consume_decision(agent, decision.jti, rev=decision.rev)

    with pytest.raises(Conflict) as refused:
        revoke_decision(proposal.id, reviewer_a, reason="too late")

    assert refused.value.code == "not_revocable"
    assert "compensation" in refused.value.message
    proposal.refresh_from_db()
    assert proposal.state == State.EXECUTING
    assert not OutboxMessage.objects.filter(proposal=proposal, kind=OutboxMessage.Kind.CANCEL).exists()


def test_compensation_note_is_recorded_after_consumption(agent, refund_policy, requester, reviewer_a):
    proposal, decision = approve(agent, reviewer_a)
    consume_decision(agent, decision.jti, rev=decision.rev)

    note_compensation(proposal.id, reviewer_a, note="Refund reversed manually, ticket 88")
    note_compensation(proposal.id, reviewer_a, note="Customer informed")

    proposal.refresh_from_db()
    assert proposal.compensation_note == "Refund reversed manually, ticket 88\nCustomer informed"
    assert proposal.state == State.EXECUTING
    assert AuditEvent.objects.filter(verb=Verb.COMPENSATION_NOTED).count() == 2


def test_revoking_twice_is_refused(agent, refund_policy, requester, reviewer_a):
    proposal, _ = approve(agent, reviewer_a)
    revoke_decision(proposal.id, reviewer_a, reason="first")

    with pytest.raises(Conflict) as refused:
        revoke_decision(proposal.id, reviewer_a, reason="second")

    assert refused.value.code == "not_revocable"
    assert OutboxMessage.objects.filter(proposal=proposal, kind=OutboxMessage.Kind.CANCEL).count() == 1


def test_a_rejection_cannot_be_revoked(agent, refund_policy, requester, reviewer_a, admin_user):
    proposal = submit(agent)
    cast_vote(
        proposal.id,
        reviewer_a,
        verdict="reject",
        digest_seen=proposal.action_digest,
        reason="duplicate",
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
    )

    with pytest.raises(Conflict):
        revoke_decision(proposal.id, admin_user, reason="changed my mind")


def test_a_waiting_proposal_has_nothing_to_revoke(agent, refund_policy, requester, admin_user):
    proposal = submit(agent)

    with pytest.raises(Conflict) as refused:
        revoke_decision(proposal.id, admin_user, reason="nothing released")

    assert refused.value.code == "not_revocable"
    proposal.refresh_from_db()
    assert proposal.state == State.AWAITING_REVIEW


# ---------------------------------------------------------------------------------------------------
# Revocation racing the agent's consume (PostgreSQL: real row locks, two connections)


@pytest.mark.postgres
@requires_postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(5))
def test_revoke_racing_consume_exactly_one_wins_and_neither_deadlocks(
    agent, refund_policy, requester, reviewer_a, attempt
):
    proposal, decision = approve(agent, reviewer_a)

    consumed, revoked = run_together(
        lambda: consume_decision(agent, decision.jti, rev=decision.rev).state,
        lambda: revoke_decision(proposal.id, reviewer_a, reason="race").state,
    )

    proposal.refresh_from_db()
    if consumed == State.EXECUTING:
        assert isinstance(revoked, Conflict) and revoked.code == "not_revocable", revoked
        assert proposal.state == State.EXECUTING
    else:
        assert isinstance(consumed, ConsumeRefused) and consumed.code == "revoked", consumed
        assert revoked == State.REVOKED
        assert proposal.state == State.REVOKED
