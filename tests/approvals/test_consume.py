"""Online consumption (fencing): `consume_decision` moves a released decision to executing exactly once,
right before the side effect, and refuses revoked, expired, superseded, consumed and stale-rev tokens."""

from datetime import timedelta

import pytest

from accounts.stepup import step_up_for
from approvals.models import Decision, OutboxMessage, PolicyVersion
from approvals.services.decisions import consume_decision, revoke_decision
from approvals.services.votes import cast_vote, request_info
from approvals.states import State
from audit.models import AuditEvent, Verb
from lib.errors import ConsumeRefused, NotFound
from tests import factories
from tests.concurrency import requires_postgres, run_together
from tests.factories import approve, fresh_step_up, submit, totp_code

pytestmark = pytest.mark.django_db


def refusal_of(agent, decision, *, rev=None, now=None) -> str:
    with pytest.raises(ConsumeRefused) as refused:
        consume_decision(agent, decision.jti, rev=decision.rev if rev is None else rev, now=now)
    return refused.value.code


def test_consuming_an_approved_decision_moves_it_to_executing(agent, refund_policy, requester, reviewer_a):
    proposal, decision = approve(agent, reviewer_a)

    consumed = consume_decision(agent, decision.jti, rev=decision.rev)

    assert consumed.state == State.EXECUTING
    proposal.refresh_from_db()
    decision.refresh_from_db()
    assert proposal.state == State.EXECUTING
    assert proposal.executing_since is not None
    assert decision.consumed_at is not None
    event = AuditEvent.objects.get(verb=Verb.DECISION_CONSUMED)
    assert event.actor == f"agent:{agent.slug}"
    assert event.data == {"jti": str(decision.jti), "rev": decision.rev}


def test_the_token_rev_is_the_proposal_rev_while_approved(agent, refund_policy, requester, reviewer_a):
    proposal, decision = approve(agent, reviewer_a)

    assert decision.rev == proposal.rev


def test_a_policy_allowed_decision_is_consumed_too(tenant, agent, requester):
    factories.make_policy(
        tenant, "small-refunds", outcome=PolicyVersion.Outcome.ALLOW, tool_pattern="payments.refund"
    )
    proposal = submit(agent)
    assert proposal.state == State.ALLOWED
    decision = Decision.objects.get(proposal=proposal)

    consume_decision(agent, decision.jti, rev=decision.rev)

    proposal.refresh_from_db()
    assert proposal.state == State.EXECUTING


def test_second_consume_of_the_same_decision_is_refused_as_consumed(
    agent, refund_policy, requester, reviewer_a
):
    proposal, decision = approve(agent, reviewer_a)
    consume_decision(agent, decision.jti, rev=decision.rev)

    assert refusal_of(agent, decision) == "consumed"

    proposal.refresh_from_db()
    assert proposal.state == State.EXECUTING
    assert AuditEvent.objects.filter(verb=Verb.DECISION_CONSUMED).count() == 1


def test_sequential_replicas_consuming_the_same_decision_exactly_one_succeeds(
    agent, refund_policy, requester, reviewer_a
):
    _, decision = approve(agent, reviewer_a)
    outcomes = []
    for _replica in range(2):
        try:
            consume_decision(agent, decision.jti, rev=decision.rev)
            outcomes.append("executing")
        except ConsumeRefused as refused:
            outcomes.append(refused.code)

    assert sorted(outcomes) == ["consumed", "executing"]


def test_stale_rev_is_refused_and_leaves_the_decision_consumable(agent, refund_policy, requester, reviewer_a):
    proposal, decision = approve(agent, reviewer_a)

    assert refusal_of(agent, decision, rev=decision.rev - 1) == "stale_rev"

    proposal.refresh_from_db()
    assert proposal.state == State.APPROVED
    consume_decision(agent, decision.jti, rev=decision.rev)
    proposal.refresh_from_db()
    assert proposal.state == State.EXECUTING


def test_revoked_decision_is_refused(agent, refund_policy, requester, reviewer_a):
    proposal, decision = approve(agent, reviewer_a)
    revoke_decision(proposal.id, reviewer_a, reason="customer withdrew the request")

    assert refusal_of(agent, decision) == "revoked"

    proposal.refresh_from_db()
    assert proposal.state == State.REVOKED


def test_expired_decision_is_refused_by_the_clock(agent, refund_policy, requester, reviewer_a):
    proposal, decision = approve(agent, reviewer_a)

    assert refusal_of(agent, decision, now=decision.expires_at) == "expired"

    proposal.refresh_from_db()
    assert proposal.state == State.EXPIRED


def test_superseded_proposal_refuses_its_decision(agent, refund_policy, requester, reviewer_a):
    first = submit(agent, task_id="task-1")
    question = request_info(
        first.id,
        reviewer_a,
        question="Which card?",
        digest_seen=first.action_digest,
        step_up=fresh_step_up(reviewer_a),
    )
    submit(agent, task_id="task-1", supersedes=first.request_id)

    assert refusal_of(agent, question) == "superseded"


def test_rejected_decision_is_never_consumable(agent, refund_policy, requester, reviewer_a):
    proposal = submit(agent)
    cast_vote(
        proposal.id,
        reviewer_a,
        verdict="reject",
        digest_seen=proposal.action_digest,
        reason="not our customer",
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
    )
    decision = Decision.objects.get(proposal=proposal)

    assert refusal_of(agent, decision) == "not_approved"


def test_another_agent_cannot_consume_the_decision(tenant, agent, refund_policy, requester, reviewer_a):
    other = factories.make_agent(tenant, "other-agent", push_token="p2", api_token="a2")
    _, decision = approve(agent, reviewer_a)

    with pytest.raises(NotFound):
        consume_decision(other, decision.jti, rev=decision.rev)


def test_every_refusal_is_an_audit_event(agent, refund_policy, requester, reviewer_a):
    _, decision = approve(agent, reviewer_a)
    refusal_of(agent, decision, rev=decision.rev + 5)

    event = AuditEvent.objects.get(verb=Verb.DECISION_CONSUME_REFUSED)
    assert event.data == {"jti": str(decision.jti), "code": "stale_rev"}


def test_a_refused_consume_queues_nothing_new(agent, refund_policy, requester, reviewer_a):
    proposal, decision = approve(agent, reviewer_a)
    before = list(OutboxMessage.objects.filter(proposal=proposal).values_list("kind", flat=True))

    refusal_of(agent, decision, rev=0)

    assert list(OutboxMessage.objects.filter(proposal=proposal).values_list("kind", flat=True)) == before


def test_consume_just_before_expiry_still_succeeds(agent, refund_policy, requester, reviewer_a):
    proposal, decision = approve(agent, reviewer_a)

    consume_decision(agent, decision.jti, rev=decision.rev, now=decision.expires_at - timedelta(seconds=1))

    proposal.refresh_from_db()
    assert proposal.state == State.EXECUTING


# ---------------------------------------------------------------------------------------------------
# Two replicas at once, each on its own database connection (PostgreSQL: real row locks)


@pytest.mark.postgres
@requires_postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(3))
def test_two_replicas_consuming_at_once_exactly_one_succeeds(
    agent, refund_policy, requester, reviewer_a, attempt
):
    proposal, decision = approve(agent, reviewer_a)

    def consume():
        return consume_decision(agent, decision.jti, rev=decision.rev).state

    results = run_together(consume, consume)

    winners = [r for r in results if r == State.EXECUTING]
    losers = [r for r in results if isinstance(r, ConsumeRefused)]
    assert len(winners) == 1, results
    assert len(losers) == 1 and losers[0].code == "consumed", results
    proposal.refresh_from_db()
    assert proposal.state == State.EXECUTING
    assert AuditEvent.objects.filter(verb=Verb.DECISION_CONSUMED).count() == 1
