"""The audit app's hand-written SQL, all of it: each statement here is one the ORM cannot make fast
enough, names the `make bench` row that measures it (bench/README.md), and has a test proving it does
what its plain-ORM twin does (tests/audit/test_storage.py; the export lines: tests/audit/
test_export_lines.py). Every one is PostgreSQL's; on SQLite each function here is its ORM twin.
Table names come from the models and every value is a parameter. Migrations keep their own SQL (the
triggers)."""

from collections.abc import Iterator
from itertools import islice
from typing import Any, cast

import psycopg
from django.db import connection, connections
from django.db.models import Field, QuerySet

from audit.models import AuditEvent, AuditPending, AuditSeal, ChainHead
from audit.people import PREFIX

# The columns an accepted event is inserted with (the rest are its id and its seal).
EVENT_COLUMNS = ("chain", "at", "actor", "verb", "subject", "data")


def _table(model) -> str:
    return connection.ops.quote_name(model._meta.db_table)


# Accepting events.


def insert_events_sql(events: list[AuditEvent]) -> tuple[str, list]:
    """The events and their pending rows in one statement (PostgreSQL): a data-modifying CTE.

    Bench R4 (chained audit append, 8 writers) and R3 (intake, whose events go with its held writes):
    one round trip for any number of events instead of two inserts."""
    # Columns, no relations: get_field gives Fields here.
    fields = [cast(Field, AuditEvent._meta.get_field(name)) for name in EVENT_COLUMNS]
    rows = ", ".join(["(" + ", ".join(["%s"] * len(fields)) + ")"] * len(events))
    params = [
        field.get_db_prep_save(getattr(event, field.attname), connection)
        for event in events
        for field in fields
    ]
    sql = (
        f"WITH accepted AS (INSERT INTO {_table(AuditEvent)} ({', '.join(EVENT_COLUMNS)}) "  # noqa: S608
        f"VALUES {rows} RETURNING id, chain) "
        f"INSERT INTO {_table(AuditPending)} (event_id, chain) SELECT id, chain FROM accepted ORDER BY id"
    )
    return sql, params


def insert_events(events: list[AuditEvent]) -> list[AuditEvent]:
    """Insert unsaved events and their pending rows; returns them as stored rows (with their ids)."""
    if connection.vendor != "postgresql":
        AuditEvent.objects.bulk_create(events)
        AuditPending.objects.bulk_create([AuditPending(event=e, chain=e.chain) for e in events])
        return events
    sql, params = insert_events_sql(events)
    with connection.cursor() as cursor:
        cursor.execute(sql + " RETURNING event_id", params)
        ids = sorted(row[0] for row in cursor.fetchall())
    columns = [field.attname for field in AuditEvent._meta.concrete_fields]
    stored = []
    for event, id_ in zip(events, ids, strict=True):  # ids come from one sequence, in VALUES order
        event.id = id_
        stored.append(AuditEvent.from_db(connection.alias, columns, [getattr(event, c) for c in columns]))
    return stored


def events_in_statement_sql(
    chain: str, events: list[dict], *, source: str, subject_sql: str, now
) -> tuple[str, list]:
    """CTEs to follow a caller's data-modifying statement (PostgreSQL) that accept `events` and their
    pending rows once per row of its CTE `source`, and their parameters. `subject_sql` and an event's
    optional `data_sql` (merged into its data) are SQL over `source`'s columns, without placeholders.

    Bench R1, R1a, R1r and R7 (the consume: approvals/services/decisions.py): the decision consumed and
    its two events are one round trip."""
    data_field = cast(Field, AuditEvent._meta.get_field("data"))
    params: list[Any] = [chain, now]
    selects = []
    for number, event in enumerate(events):
        merged = f" || {event['data_sql']}" if event.get("data_sql") else ""
        # Only the caller's names and SQL (no values) go into the text; every value is a parameter.
        selects.append(f"SELECT {number} AS n, %s, %s, {subject_sql}, %s::jsonb{merged} FROM {source}")  # noqa: S608
        params += [
            event["actor"],
            event["verb"],
            data_field.get_db_prep_save(event.get("data") or {}, connection),
        ]
    return (
        f"audit_accepted AS (INSERT INTO {_table(AuditEvent)} ({', '.join(EVENT_COLUMNS)})"  # noqa: S608
        f" SELECT %s, %s, actor, verb, subject, data FROM ({' UNION ALL '.join(selects)})"
        " AS accepted (n, actor, verb, subject, data) ORDER BY n RETURNING id, chain),"
        f" audit_accepted_pending AS (INSERT INTO {_table(AuditPending)} (event_id, chain)"
        " SELECT id, chain FROM audit_accepted ORDER BY id)",
        params,
    )


def wake(channel: str) -> None:
    """NOTIFY `channel` (PostgreSQL; on SQLite the sequencer polls). Django has no API for NOTIFY.

    Bench R4 under AUDIT_SEQUENCING=worker (its default on PostgreSQL): what brings the workers'
    sequencer to the appended events without waiting for its poll."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, '')", [channel])


# Sealing.


def seal(
    chain: str, events: list[AuditEvent], head_seq: int, head_hash: str, db: str, *, durable: bool
) -> None:
    """Insert the seals of `events` (their seq, prev_hash and hash set), drop their pending rows and
    move the chain head, through connection `db`. Not `durable`: the commit does not wait for its
    fsync (PostgreSQL).

    Bench R4: on PostgreSQL the three statements (and the SET LOCAL) go in one round trip, the seals as
    one multi-row INSERT; psycopg binds client-side here (Django's default), so several statements go
    in one execute, still in order and in this transaction. The ORM's twin is three round trips."""
    sequencer = connections[db]
    if sequencer.vendor != "postgresql":
        AuditSeal.objects.using(db).bulk_create([sealed(e) for e in events])
        AuditPending.objects.using(db).filter(event_id__in=[e.id for e in events]).delete()
        ChainHead.objects.using(db).filter(chain=chain).update(seq=head_seq, hash=head_hash)
        return
    rows = ", ".join(["(%s, %s, %s, %s, %s)"] * len(events))
    params = [value for e in events for value in (e.id, chain, e.seq, e.prev_hash, e.hash)]
    ids = [e.id for e in events]
    marks = ", ".join(["%s"] * len(ids))
    insert = f"INSERT INTO {_table(AuditSeal)} (event_id, chain, seq, prev_hash, hash) VALUES {rows}"  # noqa: S608
    delete = f"DELETE FROM {_table(AuditPending)} WHERE event_id IN ({marks})"  # noqa: S608
    move = f"UPDATE {_table(ChainHead)} SET seq = %s, hash = %s WHERE chain = %s"  # noqa: S608
    statements: list[tuple[str, list[Any]]] = [
        (insert, params),
        (delete, ids),
        (move, [head_seq, head_hash, chain]),
    ]
    if not durable:
        statements.insert(0, ("SET LOCAL synchronous_commit = off", []))
    with sequencer.cursor() as cursor:
        cursor.execute(";\n".join(sql for sql, _ in statements), [p for _, ps in statements for p in ps])


def synchronous_commit(db: str) -> None:
    """Make the current transaction's commit on connection `db` (PostgreSQL's) wait for its WAL flush,
    whatever the session's setting. A setting, not a query: the ORM has no API for it.

    Bench R4: the price of the asynchronous seals R4 measures (make_seals_durable before anything
    derived from a seal leaves the database)."""
    with connections[db].cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit = on")


def sealed(event: AuditEvent) -> AuditSeal:
    """The seal of an event whose seq, prev_hash and hash the sequencer has set."""
    if event.seq is None or event.prev_hash is None or event.hash is None:
        raise ValueError(f"event {event.id} has no place in its chain yet")
    return AuditSeal(
        event_id=event.id, chain=event.chain, seq=event.seq, prev_hash=event.prev_hash, hash=event.hash
    )


# Export lines.

_AT = """to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"""
# A CSV cell: quoted as the csv module's QUOTE_MINIMAL does under the excel dialect.
_CELL = """CASE WHEN {0} ~ '[,"\\r\\n]' THEN '"' || replace({0}, '"', '""') || '"' ELSE {0} END"""
# A spreadsheet runs a cell that starts with = + - @ as a formula (exports/server_lines.py csv_cell).
_GUARD = """CASE WHEN left({0}, 1) IN ('=', '+', '-', '@', E'\\t', E'\\r') THEN '''' || {0} ELSE {0} END"""
_MENTIONS = (
    f"CASE WHEN e.actor LIKE '{PREFIX}%%' THEN e.actor END",
    f"CASE WHEN e.subject LIKE '{PREFIX}%%' THEN e.subject END",
)


def _json(column: str) -> str:
    return f"to_json(e.{column})::text"


def _csv(column: str, guarded: bool = False) -> str:
    value = _GUARD.format(f"e.{column}") if guarded else f"e.{column}"
    return _CELL.format(value)


# Each format's line, as the text before the event's data and the text after it.
LINE_AROUND_DATA = {
    "csv": (
        f"e.seq || ',' || {_AT} || ',' || {_csv('chain')} || ',' || {_csv('actor', True)} || ',' || "
        f"{_csv('verb')} || ',' || {_csv('subject', True)} || ','",
        f"',' || {_csv('prev_hash')} || ',' || {_csv('hash')} || E'\\r\\n'",
    ),
    "jsonl": (
        f"""'{{"chain": ' || {_json("chain")} || ', "seq": ' || e.seq || ', "at": "' || {_AT} || """
        f"""'", "actor": ' || {_json("actor")} || ', "verb": ' || {_json("verb")} || """
        f"""', "subject": ' || {_json("subject")} || ', "data": '""",
        f"""', "prev_hash": ' || {_json("prev_hash")} || ', "hash": ' || {_json("hash")} || E'}}\\n'""",
    ),
}


def export_line_rows(events: QuerySet, fmt: str, page_size: int) -> Iterator[list[tuple]]:
    """The lines of an export as PostgreSQL formats them, in lists of `page_size` rows of (text before
    the data, the data as jsonb's text, text after it, the actor if a pseudonym, the subject if a
    pseudonym, seq). `events` is a values() queryset of the events' fields, in seq order; its own SQL
    (Django's) is wrapped in a SELECT that formats each row.

    Bench R5b (export throughput, against PostgreSQL's COPY of the same rows): Python neither builds a
    row through the ORM nor formats a time or a cell. Outside a transaction the rows come from ONE
    statement streamed on a connection of the export's own: one snapshot for the whole export, and the
    server formats the next rows while Python formats these, instead of each page's query waiting for
    the previous page's Python. Inside the caller's transaction (whose own writes another connection
    cannot see) the pages are read on Django's connection, one query per page by keyset."""
    head, tail = LINE_AROUND_DATA[fmt]
    # Constant text of this module around Django's own SQL of the queryset; values are parameters.
    select = f"SELECT {head}, e.data::text, {tail}, {', '.join(_MENTIONS)}, e.seq FROM ("  # noqa: S608
    if connection.in_atomic_block:
        return _keyset_rows(events, select, page_size)
    return _streamed_rows(events, select, page_size)


def _streamed_rows(events: QuerySet, select: str, page_size: int) -> Iterator[list[tuple]]:
    """From one statement streamed on a connection of its own (Django's parameters, adapters and cursor
    class), so the caller may use Django's connection between pages (the export job saves its progress
    there). The connection is closed when the export ends or is abandoned."""
    inner, params = events.query.sql_with_params()
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as own:
        with own.cursor() as cursor:
            rows = cursor.stream(select + inner + ") e ORDER BY e.seq", params, size=page_size)
            while page := list(islice(rows, page_size)):
                yield page


def _keyset_rows(events: QuerySet, select: str, page_size: int) -> Iterator[list[tuple]]:
    """One query per page after the last seq read, on Django's connection (in the caller's transaction)."""
    after_seq = 0
    while True:
        inner, params = events.filter(seq__gt=after_seq)[:page_size].query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(select + inner + ") e ORDER BY e.seq", params)
            rows = cursor.fetchall()
        if not rows:
            return
        yield rows
        after_seq = rows[-1][-1]
        if len(rows) < page_size:
            return
