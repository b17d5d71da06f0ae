"""The halt check as a scalar subquery of plain SQL, built once per process.

Bench row R3 (intake over HTTP): intake's one read and the consume's one statement carry it, on every
request, uncached. The ORM's version of it (`services.halts.active_halts(...).values("id")[:1]`) had its
expression tree rebuilt and compiled on every intake, at more CPU than the four queries the one read
replaced (bench/HISTORY.md, "R3 misses its target, and why"). tests/approvals/test_storage_halts.py
checks it finds what `active_halt` finds."""

from functools import lru_cache

from django.db import connection
from django.db.models import BigIntegerField
from django.db.models.expressions import RawSQL

from approvals.models import Halt
from approvals.storage.rows import quoted_names


def active_halt_expression(tenant_id: int, agent_id: int) -> RawSQL:
    """The id of `services.halts.active_halt(tenant_id, agent_id)`: the oldest halt in force on
    everything, the tenant or the agent, or NULL."""
    params = (Halt.Scope.GLOBAL, Halt.Scope.TENANT, tenant_id, Halt.Scope.AGENT, agent_id)
    # Only names from the model and placeholders go into the SQL; every value is a parameter.
    return RawSQL(_active_halt_sql(connection.vendor), params, output_field=BigIntegerField())  # noqa: S611


@lru_cache
def _active_halt_sql(vendor: str) -> str:
    table, column = quoted_names(Halt)
    return (
        f"SELECT {column('id')} FROM {table} WHERE {column('lifted_at')} IS NULL"  # noqa: S608
        f" AND ({column('scope')} = %s OR ({column('scope')} = %s AND {column('tenant')} = %s)"
        f" OR ({column('scope')} = %s AND {column('agent')} = %s))"
        f" ORDER BY {column('created_at')} LIMIT 1"
    )
