"""Standing grants in plain SQL: whether an agent has grants a call could meet, as a scalar subquery of
intake's one read (approvals/services/intake/read.py), so a call policy sends to people costs no query
more when its agent has none; only then does approvals/services/grants.py `plan_grant` lock and read
them (ORM).

R3 (intake over HTTP, the review path) and tests/approvals/test_intake_queries.py: without it every
call that needs people made one more round trip inside the tenant's quota lock. Its ORM twin is
`Grant.objects.filter(agent=…, state__in=…, expires_at__gt=…).exists()`
(tests/approvals/test_grants.py)."""

from datetime import datetime
from functools import lru_cache

from django.db import connection
from django.db.models import IntegerField
from django.db.models.expressions import RawSQL

from approvals.models import Grant
from approvals.storage.rows import quoted_names

# The states plan_grant reads: in force, or ended lately (a miss still names them on the page).
NAMED_STATES = (Grant.State.ACTIVE, Grant.State.REVOKED, Grant.State.LAPSED)


def grants_named_expression(agent_id: int, ended_after: datetime) -> RawSQL:
    """1 when the agent has a grant in force or one that ended after `ended_after`, else NULL."""
    params = (agent_id, *NAMED_STATES, ended_after)
    # Only names from the model and placeholders go into the SQL; every value is a parameter.
    return RawSQL(_grants_named_sql(connection.vendor), params, output_field=IntegerField())  # noqa: S611


@lru_cache
def _grants_named_sql(vendor: str) -> str:
    table, column = quoted_names(Grant)
    return (
        f"SELECT 1 FROM {table} WHERE {column('agent')} = %s"  # noqa: S608
        f" AND {column('state')} IN (%s, %s, %s) AND {column('expires_at')} > %s LIMIT 1"
    )
