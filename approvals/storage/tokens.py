"""The agent an API token's hash names, with its tenant: one statement of plain SQL built once per
process, read on every request of an agent (no cache: a token replaced or an agent removed is refused
from the next request on, in every process).

Bench rows R7 and R1r (a REST agent's allowed call: each of its requests authenticates): the ORM's
`Agent.objects.select_related("tenant").filter(api_token_hash=...).first()` cost, under
cProfile, 0.535 s per 120 requests against 0.100 s for this (bench/HISTORY.md, intake branch of 2026-12-02).
tests/approvals/test_storage_tokens.py checks it loads what that ORM lookup loads."""

from functools import lru_cache

from django.db import connection

from approvals.models import Agent
from approvals.storage.rows import model_columns, quoted_names
from tenants.models import Tenant

_TENANT_FIELD = Agent._meta.get_field("tenant")


def agent_with_token_hash(digest: str) -> Agent | None:
    """The lowest-id agent whose `api_token_hash` is `digest`, its tenant loaded with it, or None."""
    agent_columns, tenant_columns = _columns(connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(_token_sql(connection.vendor), (digest,))
        row = cursor.fetchone()
    if row is None:
        return None
    agent = agent_columns.load(row[: agent_columns.width])
    _TENANT_FIELD.set_cached_value(agent, tenant_columns.load(row[agent_columns.width :]))
    return agent


def _columns(vendor: str):
    return model_columns(Agent, "agent", vendor), model_columns(Tenant, "tenant", vendor)


@lru_cache
def _token_sql(vendor: str) -> str:
    agent_columns, tenant_columns = _columns(vendor)
    agents, agent = quoted_names(Agent)
    tenants, tenant = quoted_names(Tenant)
    return (
        f"SELECT {agent_columns.select}, {tenant_columns.select}"  # noqa: S608
        f' FROM {agents} AS "agent" INNER JOIN {tenants} AS "tenant"'
        f' ON "tenant".{tenant("id")} = "agent".{agent("tenant")}'
        f' WHERE "agent".{agent("api_token_hash")} = %s ORDER BY "agent".{agent("id")} LIMIT 1'
    )
