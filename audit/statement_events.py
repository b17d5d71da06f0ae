"""Audit events accepted inside a caller's own data-modifying statement (PostgreSQL), so that a change
and its events are one round trip (the consume: approvals/services/decisions.py). The events are
checked as `audit.chain.append_many` checks them and chained the same way after commit."""

from typing import Any, cast

from django.db import connection, transaction
from django.db.models import Field
from django.utils import timezone

from audit.chain import EVENT_COLUMNS, chain_when_committed
from audit.event_data import refuse_unfit_event
from audit.models import AuditEvent, AuditPending


def accept_sql(chain: str, events: list[dict], *, source: str, subject_sql: str) -> tuple[str, list]:
    """append_many within a caller's data-modifying statement (PostgreSQL): CTEs to follow the caller's
    that accept the events and their pending rows once per row of its CTE `source` (none if it has
    none), and their parameters. `subject_sql` (the events' one subject) and an event's optional
    `data_sql` (merged into its data) are SQL over `source`'s columns, without placeholders."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("audit.accept_sql must run inside the transaction of the change it records")
    data_field = cast(Field, AuditEvent._meta.get_field("data"))
    params: list[Any] = [chain, timezone.now()]
    selects = []
    for number, event in enumerate(events):
        refuse_unfit_event(event["verb"], event.get("data") or {})
        merged = f" || {event['data_sql']}" if event.get("data_sql") else ""
        # Only the caller's names and SQL (no values) go into the text; every value is a parameter.
        selects.append(f"SELECT {number} AS n, %s, %s, {subject_sql}, %s::jsonb{merged} FROM {source}")  # noqa: S608
        params += [
            event["actor"],
            event["verb"],
            data_field.get_db_prep_save(event.get("data") or {}, connection),
        ]
    event_table, pending_table = (
        connection.ops.quote_name(m._meta.db_table) for m in (AuditEvent, AuditPending)
    )
    chain_when_committed(chain)
    return (
        f"audit_accepted AS (INSERT INTO {event_table} ({', '.join(EVENT_COLUMNS)})"  # noqa: S608
        f" SELECT %s, %s, actor, verb, subject, data FROM ({' UNION ALL '.join(selects)})"
        " AS accepted (n, actor, verb, subject, data) ORDER BY n RETURNING id, chain),"
        f" audit_accepted_pending AS (INSERT INTO {pending_table} (event_id, chain)"
        " SELECT id, chain FROM audit_accepted ORDER BY id)",
        params,
    )
