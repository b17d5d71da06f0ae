"""CSV and JSON Lines export pages formatted by PostgreSQL itself: each row comes back as the text of its
line around the event's `data`, so Python neither builds a row through the ORM nor formats a time or
a cell; it only joins text, hashes and writes. The bytes are the Python writer's (audit/exports/lines.py
`csv_page`, `jsonl_page`, which SQLite uses), as tests/audit/test_export_lines.py checks:

- the time is `to_char` in UTC with microseconds, as `format_time` writes it;
- a text is a JSON string by `to_json` (PostgreSQL escapes exactly what `json.dumps(ensure_ascii=False)`
  escapes, in the same forms), and a CSV cell is quoted as the csv module's minimal quoting does (when
  it holds a comma, a quote, CR or LF; quotes doubled), after the formula guard (a leading `'` before
  `= + - @`, tab or CR) on actor, subject and data;
- a JSON Lines `data` is jsonb's own text (`{"k": v, ...}` in jsonb's key order, which is the order
  Python reads it back in), unless it holds a number with a fraction, which Python prints its own
  way (`1e-07` for jsonb's `0.0000001`): such a row, and any row whose text only looks like one, is
  printed by Python as before;
- CSV's `data` is compact JSON with sorted keys, which PostgreSQL cannot print: Python makes it from
  jsonb's text (json.loads and the C encoder, a few µs a row).

The pseudonyms a page mentions (for the signed head's `people`) are those of `people.pseudonyms_in`:
the actor or subject when it starts with `person:` (named by the SQL), and strings in the data that do
(walked by Python only in a row whose text holds `"person:`).
"""

import json
import re
from collections.abc import Iterator
from itertools import islice
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]

import psycopg
from django.db import connection

from audit.chain import records
from audit.people import PREFIX, pseudonyms_in

_AT = """to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"""
# A CSV cell: quoted as the csv module's QUOTE_MINIMAL does under the excel dialect.
_CELL = """CASE WHEN {0} ~ '[,"\\r\\n]' THEN '"' || replace({0}, '"', '""') || '"' ELSE {0} END"""
# A spreadsheet runs a cell that starts with = + - @ as a formula (csv_cell below).
_GUARD = """CASE WHEN left({0}, 1) IN ('=', '+', '-', '@', E'\\t', E'\\r') THEN '''' || {0} ELSE {0} END"""
_MENTIONS = (
    f"CASE WHEN e.actor LIKE '{PREFIX}%%' THEN e.actor END",
    f"CASE WHEN e.subject LIKE '{PREFIX}%%' THEN e.subject END",
)
# jsonb prints a number with a fraction as numeric does, and Python's float repr may differ from it.
# This matches every such number in jsonb's text (and, rarely, a string that looks like one).
_FRACTION = re.compile(r"[0-9]\.[0-9]+(?:[,}\]]|$)")
# How a string that starts with the pseudonyms' prefix begins in JSON text.
_MENTIONED = f'"{PREFIX}'


def _json(column: str) -> str:
    return f"to_json(e.{column})::text"


def _csv(column: str, guarded: bool = False) -> str:
    value = _GUARD.format(f"e.{column}") if guarded else f"e.{column}"
    return _CELL.format(value)


COLUMNS = {
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


def csv_cell(value: str) -> str:
    """A CSV cell of agent-provided text: a spreadsheet runs one that starts with = + - @ as a formula."""
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def compact_json(data) -> str:
    """The CSV export's `data`: compact JSON with sorted keys."""
    return json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _refuse(value):
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# compact_json's text made by one C encoder built once (json.dumps builds a JSONEncoder per call): the
# arguments json.dumps passes to it for compact_json's options (sort_keys, ensure_ascii=False, NaN
# allowed); no circular check, as a value decoded from JSON text cannot hold itself.
if c_make_encoder is not None:
    _compact_chunks = c_make_encoder(None, _refuse, encode_basestring, None, ":", ",", True, False, True)

    def _compact_text(data) -> str:
        return "".join(_compact_chunks(data, 0))

else:  # an interpreter without the C accelerator
    _compact_text = compact_json

_scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # json.loads without its space checks


def _loads(text: str):
    """json.loads of jsonb's text (which has no space around its value), without json.loads's two
    whitespace matches; anything else is left to json.loads."""
    try:
        value, end = _scan(text, 0)
        if end == len(text):
            return value
    except (ValueError, StopIteration):
        pass
    return json.loads(text)


def _csv_data(text: str) -> str:
    cell = csv_cell(_compact_text(_loads(text)))
    if '"' in cell or "," in cell or "\r" in cell or "\n" in cell:
        return '"' + cell.replace('"', '""') + '"'
    return cell


def pages(events, fmt: str, page_size: int | None = None) -> Iterator[tuple[bytes, int, set[str]]]:
    """(the lines' bytes, how many events, the pseudonyms they mention) page by page, in seq order, of
    a chain's queryset of events (PostgreSQL only).

    Outside a transaction the rows come from ONE statement streamed on a connection of the export's
    own (`_streamed_rows`): one snapshot for the whole export, and the server formats the next rows
    while Python formats these (they wait in the socket's buffers), instead of each page's query
    waiting for the previous page's Python. Inside the caller's transaction (whose own writes another
    connection cannot see) the pages are read on Django's connection, one query per page by keyset,
    all in that transaction."""
    head, tail = COLUMNS[fmt]
    # Constant text of this module around Django's own SQL of the queryset; values are parameters.
    select = f"SELECT {head}, e.data::text, {tail}, {', '.join(_MENTIONS)}, e.seq FROM ("  # noqa: S608
    page_size = page_size or records.PAGE_SIZE  # read now: settable
    if connection.in_atomic_block:
        batches = _keyset_rows(events, select, page_size)
    else:
        batches = _streamed_rows(events, select, page_size)
    jsonl = fmt == "jsonl"
    for rows in batches:
        parts, mentioned = [], set()
        for line_head, data, line_tail, actor, subject, _ in rows:
            parts.append(line_head)
            if not jsonl:
                parts.append(_csv_data(data))
            elif _FRACTION.search(data):
                parts.append(json.dumps(json.loads(data), ensure_ascii=False))
            else:
                parts.append(data)
            parts.append(line_tail)
            if actor:
                mentioned.add(actor)
            if subject:
                mentioned.add(subject)
            if _MENTIONED in data:
                mentioned |= pseudonyms_in([{"actor": "", "subject": "", "data": json.loads(data)}])
        yield "".join(parts).encode(), len(rows), mentioned


def _streamed_rows(events, select: str, page_size: int) -> Iterator[list[tuple]]:
    """The rows of the whole export in lists of `page_size`, from one statement streamed on a
    connection of its own (Django's parameters, adapters and cursor class), so the caller may use
    Django's connection between pages (the export job saves its progress there). The connection is
    closed when the export ends or is abandoned."""
    inner, params = events.order_by("seq").values(*records.EVENT_FIELDS).query.sql_with_params()
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as own:
        with own.cursor() as cursor:
            rows = cursor.stream(select + inner + ") e ORDER BY e.seq", params, size=page_size)
            while page := list(islice(rows, page_size)):
                yield page


def _keyset_rows(events, select: str, page_size: int) -> Iterator[list[tuple]]:
    """The rows of the export in pages of `page_size`, one query each after the last seq read, on
    Django's connection (inside the caller's transaction)."""
    after_seq = 0
    while True:
        page = events.filter(seq__gt=after_seq).order_by("seq").values(*records.EVENT_FIELDS)[:page_size]
        inner, params = page.query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(select + inner + ") e ORDER BY e.seq", params)
            rows = cursor.fetchall()
        if not rows:
            return
        yield rows
        after_seq = rows[-1][-1]
        if len(rows) < page_size:
            return
