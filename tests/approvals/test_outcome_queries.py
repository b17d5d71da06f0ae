"""The outcome report of an executing proposal is one statement on PostgreSQL: the proposal settled and
both audit events in one round trip; anything else (the same report again, a decision that needed no
consume, an unknown outcome settling, a refusal) is read step by step. What the statement writes is what
the step-by-step path writes (its ORM twin, which SQLite runs)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.models import Proposal
from approvals.services import decisions
from approvals.services.decisions import consume_decision, record_outcome
from approvals.states import State
from audit.chain.sequencer import sequence_pending
from audit.chain.verification import verify_chain
from audit.labels import tenant_chain
from audit.models import AuditEvent
from lib.errors import Conflict
from tests.concurrency import requires_postgres
from tests.factories import approve

pytestmark = pytest.mark.django_db


def statements(captured) -> list[str]:
    """The statements a call made, without the savepoint the test's own transaction turns atomic into."""
    return [q["sql"] for q in captured if not q["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))]


def executing(agent, reviewer):
    proposal, decision = approve(agent, reviewer)
    consume_decision(agent, decision.jti, rev=decision.rev)
    return proposal, decision


@pytest.mark.postgres
@requires_postgres
def test_an_outcome_report_of_an_executing_proposal_is_one_statement(
    agent, refund_policy, requester, reviewer_a
):
    _, decision = executing(agent, reviewer_a)

    with CaptureQueriesContext(connection) as captured:
        settled = record_outcome(agent, decision.jti, status="succeeded", transaction_id="tx-1")

    assert len(statements(captured)) == 1, statements(captured)
    assert settled.state == State.SUCCEEDED and settled.transaction_id == "tx-1"


@pytest.mark.postgres
@requires_postgres
def test_the_same_report_again_is_read_step_by_step_and_changes_nothing(
    agent, refund_policy, requester, reviewer_a
):
    proposal, decision = executing(agent, reviewer_a)
    record_outcome(agent, decision.jti, status="failed")
    before = AuditEvent.objects.count()

    again = record_outcome(agent, decision.jti, status="failed")

    assert again.state == State.FAILED and AuditEvent.objects.count() == before
    with pytest.raises(Conflict):
        record_outcome(agent, decision.jti, status="succeeded")  # failed is settled


def settled_by(agent, reviewer, monkeypatch, *, one_statement: bool, **report):
    proposal, decision = executing(agent, reviewer)
    Proposal.objects.filter(pk=proposal.pk).update(transaction_id="tx-kept")
    with monkeypatch.context() as patched:
        if not one_statement:
            patched.setattr(decisions, "on_postgresql", lambda: False)  # the ORM twin
        record_outcome(agent, decision.jti, **report)
    stored = Proposal.objects.get(pk=proposal.pk)
    events = AuditEvent.objects.filter(subject=f"proposal:{proposal.id}").order_by("-id")[:2][::-1]
    trail = [
        (
            event.verb,
            event.actor,
            {**event.data, **({"jti": "-", "idempotency_key": "-"} if "jti" in event.data else {})},
        )
        for event in events
    ]
    row = (
        stored.state,
        stored.rev,
        stored.transaction_id,
        stored.outcome_detail,
        stored.settled_at is not None,
    )
    return row, trail


@pytest.mark.postgres
@requires_postgres
@pytest.mark.parametrize(
    "report",
    [
        {"status": "succeeded", "transaction_id": "tx-9", "detail": "refunded"},
        {"status": "failed", "detail": "x" * 1500},  # the transaction id it had is kept
        {"status": "unknown"},  # not settled: no settled_at
    ],
)
def test_the_one_statement_writes_what_its_orm_twin_writes(
    tenant, agent, refund_policy, requester, reviewer_a, monkeypatch, report
):
    one = settled_by(agent, reviewer_a, monkeypatch, one_statement=True, **report)
    twin = settled_by(agent, reviewer_a, monkeypatch, one_statement=False, **report)

    assert one == twin
    sequence_pending()  # what the after-commit hook does outside the test's transaction
    assert verify_chain(tenant_chain(tenant.id)).ok
