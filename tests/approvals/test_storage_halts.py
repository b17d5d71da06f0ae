"""approvals/storage/halts.py: the halt check in plain SQL finds what its ORM twin
(services.halts.active_halt) finds, scope by scope. Run on SQLite and on PostgreSQL (DATABASE_URL)."""

import pytest
from django.utils import timezone

from approvals.models import Agent, Halt
from approvals.services.halts import active_halt
from approvals.storage.halts import active_halt_expression
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def other_agent(tenant):
    return factories.make_agent(tenant, "invoice-bot", push_token="p2", api_token="a2")


@pytest.fixture
def globex_agent(other_tenant):
    return factories.make_agent(other_tenant, "globex-bot", push_token="p3", api_token="a3")


def test_the_plain_sql_halt_check_finds_the_halt_active_halt_finds(
    tenant, agent, other_agent, globex_agent, admin_user
):
    def in_one_query():
        expression = active_halt_expression(agent.tenant_id, agent.id)
        return (
            Agent.objects.filter(pk=agent.pk).annotate(found=expression).values_list("found", flat=True).get()
        )

    def agree() -> int | None:
        found = active_halt(agent.tenant_id, agent.id)
        assert in_one_query() == (found.id if found else None)
        return in_one_query()

    def halt(**fields):
        return Halt.objects.create(reason="test", operator=admin_user, **fields)

    assert agree() is None
    halt(scope=Halt.Scope.GLOBAL, lifted_at=timezone.now())
    halt(scope=Halt.Scope.TENANT, tenant=globex_agent.tenant)
    halt(scope=Halt.Scope.AGENT, agent=other_agent)
    assert agree() is None  # lifted, another tenant's, another agent's
    by_agent = halt(scope=Halt.Scope.AGENT, agent=agent)
    assert agree() == by_agent.id
    halt(scope=Halt.Scope.TENANT, tenant=tenant)
    assert agree() == by_agent.id  # the oldest in force
    Halt.objects.filter(pk=by_agent.pk).update(lifted_at=timezone.now())
    assert agree() is not None
    Halt.objects.filter(lifted_at__isnull=True, scope=Halt.Scope.TENANT).update(lifted_at=timezone.now())
    everything = halt(scope=Halt.Scope.GLOBAL)
    assert agree() == everything.id
