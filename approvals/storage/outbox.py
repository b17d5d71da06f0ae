"""The direct send's claim of one outbox row, as one statement: `UPDATE … RETURNING`.

Why not the ORM: the claim sits between a decision's commit and its continuation, the path bench rows
R1, R1o, R1a and R1ao measure (bench/README.md: "the outbox row claimed, its proposal's state read", 5.4
ms before and 3.0 ms after in the R1o trace). The ORM has no `UPDATE … RETURNING`, so its twin is a
conditional update and a read, two round trips: `filter(pk, pending, due).update(...)` then `get(pk)`.
tests/approvals/test_outbox_storage.py proves the two give the same row on SQLite and PostgreSQL.

The row comes back through `Manager.raw()`, which applies the fields' converters (SQLite's datetimes,
JSON) and builds the instance with `Model.from_db`, as a query would.
"""

from datetime import datetime
from functools import lru_cache

from django.db import connection

from approvals.models import OutboxMessage


def claim_one(message_id: int, *, lease_until: datetime, now: datetime) -> OutboxMessage | None:
    """Lease the row until `lease_until` and count an attempt, if it is pending and due at `now`; the
    row as claimed, or None (another claimant has it, or it is settled)."""
    at = connection.ops.adapt_datetimefield_value
    rows = OutboxMessage.objects.raw(
        _claim_one_sql(connection.vendor),
        [at(lease_until), message_id, OutboxMessage.Status.PENDING.value, at(now)],
    )
    return next(iter(rows), None)


@lru_cache
def _claim_one_sql(vendor: str) -> str:
    """Built once per process and database vendor: only quoted names go into the text; every value is a
    parameter. (PostgreSQL, and SQLite 3.35 and later, have `RETURNING`.)"""
    quote = connection.ops.quote_name
    fields = OutboxMessage._meta.concrete_fields
    table = quote(OutboxMessage._meta.db_table)
    columns = {field.name: quote(field.column) for field in fields}

    def column(name: str) -> str:
        return columns[name]

    returning = ", ".join(columns[field.name] for field in fields)
    attempts = column("attempts")
    return (
        f"UPDATE {table} SET {column('next_attempt_at')} = %s, {attempts} = {attempts} + 1"  # noqa: S608
        f" WHERE {column('id')} = %s AND {column('status')} = %s AND {column('next_attempt_at')} <= %s"
        f" RETURNING {returning}"
    )
