"""The agent a REST API token belongs to: one statement built once per process (approvals/sql.py), the
agent's row and its tenant's together, read on every request (no cache: a token replaced or an agent
removed is refused from the next request on, in every process).

The checks are the ORM lookup's before it: the row is found by the SHA-256 of the token (the database
never holds the token), the lowest id first as `.first()` took it, and the stored hash is compared with
the presented one in constant time.
"""

import hmac
from functools import lru_cache

from django.db import connection

from approvals.models import Agent
from approvals.sql import model_columns, quoted_names
from lib.tokens import hash_token
from tenants.models import Tenant

_TENANT_FIELD = Agent._meta.get_field("tenant")


def agent_for_token(token: str) -> Agent | None:
    """The agent whose API token this is, with its tenant, or None."""
    digest = hash_token(token)
    agent_columns, tenant_columns = _columns(connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(_token_sql(connection.vendor), (digest,))
        row = cursor.fetchone()
    if row is None:
        return None
    agent = agent_columns.load(row[: agent_columns.width])
    if not hmac.compare_digest(agent.api_token_hash, digest):
        return None
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
