"""approvals/storage/tokens.py: the agent a token's hash names, read in plain SQL, is what its ORM twin
(`Agent.objects.select_related("tenant").filter(api_token_hash=...).first()`) loads, field by field,
its tenant's too. Run on SQLite and on PostgreSQL (DATABASE_URL)."""

import pytest

from approvals.agent_api.tokens import agent_for_token
from approvals.models import Agent
from approvals.storage.tokens import agent_with_token_hash
from lib.tokens import hash_token
from tests.factories import make_agent

pytestmark = pytest.mark.django_db


def orm_twin(digest: str) -> Agent | None:
    return Agent.objects.select_related("tenant").filter(api_token_hash=digest).first()


def fields(instance) -> dict:
    return {field.attname: getattr(instance, field.attname) for field in instance._meta.concrete_fields}


def test_the_plain_sql_lookup_loads_what_the_orm_loads(agent, other_tenant):
    make_agent(other_tenant, "globex-bot", push_token="p3", api_token="globex-api-secret")
    for token in ("api-secret", "globex-api-secret", "no-such-token"):
        digest = hash_token(token)
        stored, twin = agent_with_token_hash(digest), orm_twin(digest)
        if twin is None:
            assert stored is None
            continue
        assert stored is not None
        assert fields(stored) == fields(twin)  # JSON, datetimes, booleans converted as the ORM does
        assert fields(stored.tenant) == fields(twin.tenant)
        assert stored._state.adding is False and stored._state.db == twin._state.db  # stored rows


def test_two_agents_with_one_hash_read_as_the_orm_reads_them_lowest_id_first(tenant):
    first = make_agent(tenant, "first", api_token="shared")
    make_agent(tenant, "second", api_token="shared")

    stored, twin = agent_with_token_hash(hash_token("shared")), orm_twin(hash_token("shared"))
    assert stored is not None and twin is not None
    assert stored.pk == twin.pk == first.pk


def test_a_token_authenticates_its_agent_with_its_tenant_in_one_query(agent, django_assert_num_queries):
    with django_assert_num_queries(1):
        found = agent_for_token("api-secret")
        assert found is not None
        assert found.tenant.slug == agent.tenant.slug
    assert agent_for_token("api-secret-but-not-quite") is None
