"""A consume that releases is one statement on PostgreSQL: the claim (proposal to executing, decision
consumed) and both audit events in one round trip; a refusal's reason is read only when it claimed
nothing. What it writes is what the step-by-step consume wrote (SQLite still writes it step by step)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.models import Decision, PolicyVersion
from approvals.services.decisions import consume_decision
from approvals.states import State
from audit.chain.sequencer import sequence_pending
from audit.chain.verification import verify_chain
from audit.labels import tenant_chain
from audit.models import AuditEvent, Verb
from lib.errors import ConsumeRefused
from tests import factories
from tests.concurrency import requires_postgres
from tests.factories import approve, submit

pytestmark = pytest.mark.django_db


def statements(captured) -> list[str]:
    """The statements a call made, without the savepoint the test's own transaction turns atomic into."""
    return [q["sql"] for q in captured if not q["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))]


@pytest.mark.postgres
@requires_postgres
def test_a_consume_that_releases_is_one_statement(agent, refund_policy, requester, reviewer_a):
    _, decision = approve(agent, reviewer_a)

    with CaptureQueriesContext(connection) as captured:
        consume_decision(agent, decision.jti, rev=decision.rev)

    assert len(statements(captured)) == 1, statements(captured)


@pytest.mark.postgres
@requires_postgres
def test_a_refused_consume_reads_its_reason_after_the_statement_claimed_nothing(
    agent, refund_policy, requester, reviewer_a
):
    _, decision = approve(agent, reviewer_a)

    with CaptureQueriesContext(connection) as captured, pytest.raises(ConsumeRefused) as refused:
        consume_decision(agent, decision.jti, rev=decision.rev + 1)

    assert refused.value.code == "stale_rev"
    assert "WITH claimed AS (UPDATE" in statements(captured)[0]
    assert len(statements(captured)) > 1


@pytest.mark.parametrize("outcome", ["approve", "allow"])
def test_a_consume_records_the_transition_and_the_consume_and_the_chain_verifies(
    tenant, agent, refund_policy, requester, reviewer_a, outcome
):
    if outcome == "allow":
        factories.make_policy(
            tenant, "tickets", tool_pattern="tickets.*", outcome=PolicyVersion.Outcome.ALLOW
        )
        proposal = submit(agent, action={"tool": "tickets.close", "arguments": {"id": "7"}})
        decision = Decision.objects.get(proposal=proposal)
    else:
        proposal, decision = approve(agent, reviewer_a)
    released_in, rev = proposal.state, proposal.rev

    consumed = consume_decision(agent, decision.jti, rev=decision.rev)

    assert consumed.state == State.EXECUTING
    assert consumed.rev == rev + 1
    assert consumed.task_id == proposal.task_id  # a field the statement did not return is read on use
    assert consumed.executing_since is not None
    decision.refresh_from_db()
    assert decision.consumed_at is not None
    transitioned, spent = AuditEvent.objects.filter(subject=f"proposal:{proposal.id}").order_by("-id")[:2][
        ::-1
    ]
    assert (transitioned.verb, spent.verb) == (Verb.PROPOSAL_TRANSITIONED, Verb.DECISION_CONSUMED)
    assert transitioned.actor == spent.actor == f"agent:{agent.slug}"
    assert transitioned.data == {
        "from": released_in,
        "to": State.EXECUTING,
        "reason": "decision consumed",
        "rev": rev + 1,
        "jti": str(decision.jti),
    }
    assert spent.data == {"jti": str(decision.jti), "rev": decision.rev}
    sequence_pending()  # what the after-commit hook does outside the test's transaction
    assert verify_chain(tenant_chain(tenant.id)).ok


@pytest.mark.postgres
@requires_postgres
def test_the_consume_request_reads_nothing_after_its_statement_while_traces_are_off(
    client, agent, refund_policy, requester, reviewer_a
):
    """The claimed proposal carries only what the statement returned; its trace parent is read (one more
    query) only for a traced call's span, never for an untraced one."""
    _, decision = approve(agent, reviewer_a)

    with CaptureQueriesContext(connection) as captured:
        answer = client.post(
            f"/api/v1/decisions/{decision.jti}/consume",
            data={"rev": decision.rev},
            content_type="application/json",
            HTTP_AUTHORIZATION="Bearer api-secret",
        )

    assert (answer.status_code, answer.json()) == (200, {"state": "executing"})
    sent = statements(captured)
    assert len(sent) == 2, sent  # the agent's token, then the claim
    assert sent[1].startswith("WITH claimed AS (UPDATE")
