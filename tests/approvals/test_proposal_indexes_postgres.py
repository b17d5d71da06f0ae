"""On PostgreSQL, the lookups of proposals by tenant, by agent and by editor read an index though none of
the three columns has one of its own (migration 0017): tenant_id and agent_id lead composite indexes,
edited_by_id has a partial one where it is set. What Django's PROTECT checks and the agent's and
tenant's lookups send, among 20,000 proposals of another tenant and agent."""

import pytest
from django.conf import settings
from django.db import connection

from approvals.models import Proposal
from tests import factories
from tests.factories import submit
from tests.query_plans import plan_of

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not settings.IS_POSTGRES, reason="EXPLAIN plans are PostgreSQL's (set DATABASE_URL)"),
    pytest.mark.django_db,
]


def test_no_single_column_index_on_tenant_agent_or_editor():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'approvals_proposal'::regclass"
        )
        definitions = [row[0] for row in cursor.fetchall()]
    for column in ("tenant_id", "agent_id", "edited_by_id"):
        assert not [d for d in definitions if d.endswith(f"USING btree ({column})")], definitions
    assert [d for d in definitions if "(edited_by_id) WHERE (edited_by_id IS NOT NULL)" in d], definitions


@pytest.mark.parametrize("lookup", ["tenant", "agent", "edited_by"])
def test_a_lookup_by_tenant_agent_or_editor_reads_an_index(agent, refund_policy, requester, lookup):
    factories.clone_waiting(submit(agent), 20_000)
    other_tenant = factories.make_tenant("other")
    values = {
        "tenant": other_tenant,
        "agent": factories.make_agent(other_tenant, slug="other-agent"),
        "edited_by": requester,
    }
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE approvals_proposal")
    plan = plan_of(Proposal.objects.filter(**{lookup: values[lookup]}).values("pk")[:1])
    assert "Index" in plan, plan
    assert "Seq Scan on approvals_proposal" not in plan, plan
