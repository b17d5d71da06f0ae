"""A standing grant's budget holds under concurrency (approvals/services/grants.py): "refunds of at most
EUR 50, 30 uses, EUR 600 in total, this week", approved by two people; 30 submissions of EUR 25 at once,
each on its own PostgreSQL connection, lined up on a barrier, spend EUR 600 and no more (24 calls), and
the other 6 go to people."""

from decimal import Decimal

import pytest

from approvals.models import Grant, GrantMiss, GrantUse, Proposal
from approvals.states import State
from audit.chain.verification import verify_chain
from audit.models import AuditEvent, Verb
from tests.approvals.grant_helpers import active_grant, grant_policy, refund
from tests.concurrency import requires_postgres, run_together

pytestmark = [pytest.mark.postgres, requires_postgres, pytest.mark.django_db(transaction=True)]

PARALLEL = 30


def test_thirty_parallel_refunds_of_eur_25_spend_eur_600_and_no_more(
    tenant, agent, refund_policy, requester, reviewer_a, reviewer_b
):
    grant_policy(tenant)
    grant = active_grant(agent, reviewer_a, reviewer_b)

    results = run_together(*[lambda: refund(agent, amount="25.00")] * PARALLEL)

    assert all(isinstance(r, Proposal) for r in results), [r for r in results if not isinstance(r, Proposal)]
    states = sorted(r.state for r in results)
    assert states.count(State.ALLOWED) == 24
    assert states.count(State.AWAITING_REVIEW) == 6
    grant.refresh_from_db()
    assert (grant.uses, grant.spent) == (24, {"EUR": "600.00"})
    uses = GrantUse.objects.filter(grant=grant)
    assert sum(use.amount or Decimal(0) for use in uses) == Decimal("600.00")
    assert sorted(use.uses_left for use in uses) == list(range(6, 30))  # each left count once
    assert {miss.reason for miss in GrantMiss.objects.filter(grant=grant)} == {
        "EUR 25.00 is more than the EUR 0.00 left"
    }
    assert AuditEvent.objects.filter(verb=Verb.GRANT_USED).count() == 24
    assert verify_chain(f"tenant:{agent.tenant_id}").ok


def test_a_revocation_racing_calls_leaves_no_unconsumed_decision_under_the_grant(
    tenant, agent, refund_policy, requester, reviewer_a, reviewer_b
):
    from approvals.services.grants import revoke_grant

    grant_policy(tenant)
    grant = active_grant(agent, reviewer_a, reviewer_b)

    calls = [lambda: refund(agent, amount="10.00")] * 8
    results = run_together(*calls, lambda: revoke_grant(grant.id, reviewer_a, reason="stop"))

    assert isinstance(results[-1], Grant)
    assert Grant.objects.get(pk=grant.pk).state == Grant.State.REVOKED
    # Whatever was decided under it before the revocation is revoked too; after it, calls go to people.
    under_grant = Proposal.objects.filter(grant_use__grant=grant)
    assert not under_grant.filter(state=State.ALLOWED).exists()
    assert all(
        p.state in (State.REVOKED, State.AWAITING_REVIEW)
        for p in Proposal.objects.filter(tool="payments.refund")
    )
