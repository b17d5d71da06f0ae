"""A target's earlier proposals counted by state, as one scalar subquery of plain SQL built once per
process.

Bench row R3 (intake over HTTP): intake reads a policy's `history` counts inside the one read it makes
before writing (`policy.history.policy_counts_expression` builds this with the counts CEL sees). The
ORM's version of it rebuilt and compiled its expression tree on every intake, at more CPU than the four
queries the one read replaced (bench/HISTORY.md, "R3 misses its target, and why").
tests/approvals/test_storage_history.py checks it counts what `policy.history.policy_counts` (the ORM)
counts, state by state."""

from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache

from django.db import connection
from django.db.models import CharField
from django.db.models.expressions import RawSQL

from approvals.models import Proposal
from approvals.storage.rows import quoted_names


def target_counts_expression(
    *,
    tenant_id: int,
    target_key: str,
    since: datetime,
    excluding_task: tuple[int, str],
    counts: Sequence[tuple[str, ...] | None],
) -> RawSQL:
    """The tenant's proposals on `target_key` created since `since`, but for the task `excluding_task`
    (agent id, task id), counted once per entry of `counts` (the states to count, sorted; None: every
    state) and read as the text "n,n,…" in that order; NULL when there is no such row."""
    states = [state for among in counts if among is not None for state in among]
    since_value = connection.ops.adapt_datetimefield_value(since)
    params = (*states, tenant_id, target_key, since_value, *excluding_task)
    # Only names from the models and placeholders go into the SQL; every value is a parameter.
    return RawSQL(_target_counts_sql(connection.vendor, tuple(counts)), params, output_field=CharField())  # noqa: S611


@lru_cache
def _target_counts_sql(vendor: str, counts: tuple[tuple[str, ...] | None, ...]) -> str:
    table, column = quoted_names(Proposal)

    def count(among) -> str:
        if among is None:
            return "COUNT(*)"
        placeholders = ", ".join(["%s"] * len(among))  # the states, in their order: see the params
        return f"SUM(CASE WHEN {column('state')} IN ({placeholders}) THEN 1 ELSE 0 END)"

    counted = " || ',' || ".join(count(among) for among in counts)
    return (
        f"SELECT {counted} FROM {table} WHERE {column('tenant')} = %s AND {column('target_key')} = %s"  # noqa: S608
        f" AND {column('created_at')} >= %s AND NOT ({column('agent')} = %s AND {column('task_id')} = %s)"
    )
