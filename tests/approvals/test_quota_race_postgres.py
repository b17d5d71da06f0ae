"""The open-proposal ceilings and the buckets hold under concurrency (approvals/services/quotas.py): N
agents' submissions at once, each on its own PostgreSQL connection, lined up on a barrier, never take an
agent or a tenant past its limit. Every intake locks the tenant's and the agent's quota rows before it
counts, so the count of the next one sees the proposal of the one before."""

import pytest

from approvals.models import Proposal, QuotaState
from approvals.services.quotas import set_agent_limits, set_tenant_limits
from approvals.states import WAITING_FOR_PEOPLE
from audit.chain.verification import verify_chain
from audit.models import AuditEvent, Verb
from lib.errors import QuotaExceeded
from tests import factories
from tests.concurrency import requires_postgres, run_together
from tests.factories import submit

pytestmark = [pytest.mark.postgres, requires_postgres, pytest.mark.django_db(transaction=True)]

PARALLEL = 12


def outcomes(results) -> tuple[int, list[str]]:
    created = [r for r in results if isinstance(r, Proposal)]
    refused = [r for r in results if isinstance(r, QuotaExceeded)]
    assert len(created) + len(refused) == len(results), [
        r for r in results if not isinstance(r, Proposal | QuotaExceeded)
    ]
    return len(created), sorted({r.code for r in refused})


@pytest.mark.parametrize("attempt", range(3))
def test_parallel_submissions_never_exceed_the_agents_ceiling(agent, refund_policy, attempt):
    set_agent_limits(agent, open_proposals_max=3)
    submit(agent)  # the quota rows exist; the first of the race would otherwise create them

    created, codes = outcomes(run_together(*[lambda: submit(agent)] * PARALLEL))

    assert (created, codes) == (2, ["too_many_open"])
    assert Proposal.objects.filter(agent=agent, state__in=WAITING_FOR_PEOPLE).count() == 3
    state = QuotaState.objects.get(agent=agent)
    assert state.refused == PARALLEL - 2
    assert (
        AuditEvent.objects.filter(verb=Verb.INTAKE_THROTTLED).count() == 1
    )  # one per window, not per refusal


def test_parallel_first_intakes_create_the_quota_rows_once_and_keep_the_ceiling(agent, refund_policy):
    set_agent_limits(agent, open_proposals_max=4)

    created, codes = outcomes(run_together(*[lambda: submit(agent)] * PARALLEL))

    assert (created, codes) == (4, ["too_many_open"])
    assert QuotaState.objects.filter(tenant=agent.tenant).count() == 2


def test_parallel_agents_never_exceed_the_tenants_ceiling(tenant, refund_policy):
    agents = [
        factories.make_agent(tenant, slug=f"agent-{n}", push_token=f"p{n}", api_token=f"a{n}")
        for n in range(PARALLEL)
    ]
    set_tenant_limits(tenant, open_proposals_max=5)
    for agent in agents[:2]:
        submit(agent)

    created, codes = outcomes(run_together(*[lambda agent=agent: submit(agent) for agent in agents]))

    assert (created, codes) == (3, ["tenant_too_many_open"])
    assert Proposal.objects.filter(tenant=tenant, state__in=WAITING_FOR_PEOPLE).count() == 5


def test_parallel_submissions_spend_the_burst_exactly_once(agent, refund_policy):
    set_agent_limits(agent, intake_burst=5, intake_per_minute=1)
    submit(agent)

    created, codes = outcomes(run_together(*[lambda: submit(agent)] * PARALLEL))

    assert (created, codes) == (4, ["rate_limited"])
    assert Proposal.objects.filter(agent=agent).count() == 5
    assert verify_chain(f"tenant:{agent.tenant_id}").ok
