"""CSV and JSON Lines export pages formatted by PostgreSQL itself (the statement: audit/storage/__init__.py
`export_line_rows`): each row comes back as the text of its line around the event's `data`, so Python
neither builds a row through the ORM nor formats a time or a cell; it only joins text, hashes and
writes. The bytes are the Python writer's (audit/exports/lines.py `csv_page`, `jsonl_page`, which
SQLite uses), as tests/audit/test_export_lines.py checks:

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
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]

from audit import storage
from audit.chain import records
from audit.people import PREFIX, pseudonyms_in

# jsonb prints a number with a fraction as numeric does, and Python's float repr may differ from it.
# This matches every such number in jsonb's text (and, rarely, a string that looks like one).
_FRACTION = re.compile(r"[0-9]\.[0-9]+(?:[,}\]]|$)")
# How a string that starts with the pseudonyms' prefix begins in JSON text.
_MENTIONED = f'"{PREFIX}'


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

    Outside a transaction the rows come from one statement streamed on a connection of the export's
    own; inside the caller's transaction, one query per page by keyset (storage.export_line_rows)."""
    page_size = page_size or records.PAGE_SIZE  # read now: settable
    rows_of_lines = events.order_by("seq").values(*records.EVENT_FIELDS)
    batches = storage.export_line_rows(rows_of_lines, fmt, page_size)
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
