"""Accepting events: `append()` runs inside the transaction of the change it records and only inserts the
event and its pending row (one statement on PostgreSQL): no lock, so a tenant's writes never queue
behind one another. The events are chained once that transaction commits (audit/chain/sequencer.py).
`accept_sql()` does the same inside a caller's own data-modifying statement (PostgreSQL), so that a
change and its events are one round trip (the consume: approvals/services/decisions.py)."""

from typing import Any, cast

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Field
from django.utils import timezone

from audit.chain.event_data import refuse_unfit_event
from audit.chain.sequencer import sequence_after_commit
from audit.chain.wakeup import wake_sequencers
from audit.models import AuditEvent, AuditPending
from lib.commit_hooks import on_commit_in_background
from lib.held_writes import write


def append(chain: str, *, actor: str, verb: str, subject: str, data: dict | None = None) -> AuditEvent:
    """Accept one event in the current transaction (an insert, no lock); it is chained once the
    transaction commits (by the worker, or right after the commit: AUDIT_SEQUENCING). Its seq and hash
    are None until then."""
    return append_many(chain, [{"actor": actor, "verb": verb, "subject": subject, "data": data}])[0]


def append_many(chain: str, events: list[dict]) -> list[AuditEvent]:
    """Accept several events of one chain in the current transaction, in this order, with one statement
    on PostgreSQL (one round trip, however many): each dict has actor, verb, subject and optionally data.
    They are chained, in this order and next to each other unless another writer's events commit in
    between, once the transaction commits."""
    accepted = _accepted(chain, events)
    if not accepted:
        return []
    if connection.vendor == "postgresql":
        sql, params = _insert_with_pending_sql(accepted)
        with connection.cursor() as cursor:
            cursor.execute(sql + " RETURNING event_id", params)
            ids = sorted(row[0] for row in cursor.fetchall())
        accepted = _as_stored(accepted, ids)
    else:
        AuditEvent.objects.bulk_create(accepted)
        AuditPending.objects.bulk_create([AuditPending(event=e, chain=chain) for e in accepted])
    chain_when_committed(chain)
    return accepted


def accept_many(chain: str, events: list[dict]) -> None:
    """append_many for a caller that reads nothing back: on PostgreSQL its statement goes with the
    caller's held writes, if it holds them (lib/held_writes.py), in the same round trip."""
    if connection.vendor != "postgresql":
        append_many(chain, events)  # the pending rows need the events' ids: two statements
        return
    accepted = _accepted(chain, events)
    if accepted:
        write(*_insert_with_pending_sql(accepted))
        chain_when_committed(chain)


def _accepted(chain: str, events: list[dict]) -> list[AuditEvent]:
    """The events as unsaved rows, each checked (a verb the trail knows, no secret in its data)."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("audit.append must run inside the transaction of the change it records")
    now = timezone.now()  # microsecond precision survives every round trip: the hash can be recomputed
    accepted = []
    for event in events:
        data = event.get("data") or {}
        refuse_unfit_event(event["verb"], data)
        accepted.append(
            AuditEvent(
                chain=chain,
                at=now,
                actor=event["actor"],
                verb=event["verb"],
                subject=event["subject"],
                data=data,
            )
        )
    return accepted


def chain_when_committed(chain: str) -> None:
    # One hook per transaction (and chain), on the process's after-commit thread (the request answers
    # without waiting for it), where one queued run covers every commit before it: a NOTIFY that wakes
    # the workers' sequencers, or this process chaining the events itself.
    if settings.AUDIT_SEQUENCING == "worker":
        on_commit_in_background(wake_sequencers, key="audit.wake")
    else:
        on_commit_in_background(lambda: sequence_after_commit(chain), key=("audit.sequence", chain))


EVENT_COLUMNS = ("chain", "at", "actor", "verb", "subject", "data")


def _insert_with_pending_sql(events: list[AuditEvent]) -> tuple[str, list]:
    """The events and their pending rows in one statement (PostgreSQL): a data-modifying CTE."""
    # Columns, no relations: get_field gives Fields here.
    fields = [cast(Field, AuditEvent._meta.get_field(name)) for name in EVENT_COLUMNS]
    rows = ", ".join(["(" + ", ".join(["%s"] * len(fields)) + ")"] * len(events))
    params = [
        field.get_db_prep_save(getattr(event, field.attname), connection)
        for event in events
        for field in fields
    ]
    event_table = connection.ops.quote_name(AuditEvent._meta.db_table)
    pending_table = connection.ops.quote_name(AuditPending._meta.db_table)
    sql = (
        f"WITH accepted AS (INSERT INTO {event_table} ({', '.join(EVENT_COLUMNS)}) "  # noqa: S608
        f"VALUES {rows} RETURNING id, chain) "
        f"INSERT INTO {pending_table} (event_id, chain) SELECT id, chain FROM accepted ORDER BY id"
    )
    return sql, params


def _as_stored(events: list[AuditEvent], ids: list[int]) -> list[AuditEvent]:
    """The events as stored rows (with their ids), as a query would have read them."""
    columns = [field.attname for field in AuditEvent._meta.concrete_fields]
    stored = []
    for event, id_ in zip(events, ids, strict=True):  # ids come from one sequence, in VALUES order
        event.id = id_
        stored.append(AuditEvent.from_db(connection.alias, columns, [getattr(event, c) for c in columns]))
    return stored


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
