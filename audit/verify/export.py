"""Verifying a CSV or JSON Lines export offline: its events, and the signed head line it ends with."""

import hashlib
import json
from collections.abc import Iterable, Iterator
from typing import Any

from .bundle import BundleError, plain_records
from .chains import (
    CSV_COLUMNS,
    EXPORT_HEAD_FORMAT,
    EXPORT_HEAD_MARK,
    Result,
    event_hash,
    export_head_payload,
    public_keys,
    signature_problem,
)
from .hashing import SAFE_INTEGER, PlainJson

# --------------------------------------------------------------------------------------------------
# CSV and JSON Lines exports: events, then one signed head line


def _csv_value(cell: str) -> str:
    """Undo the export's formula guard (a leading ' before = + - @ tab or CR)."""
    return cell[1:] if cell[:1] == "'" and cell[1:2] in ("=", "+", "-", "@", "\t", "\r") else cell


def _csv_events(lines: Iterable[bytes]) -> Iterator[tuple[dict, bool]]:
    """(event, whether it is plain: hashing.PlainJson) of each row."""
    import csv

    rows = csv.reader(line.decode("utf-8") for line in lines)
    if next(rows, None) != list(CSV_COLUMNS):
        raise BundleError("not a Reviewer CSV export: its header differs")
    decoder = PlainJson()
    for row in rows:
        event: dict[str, Any] = dict(zip(CSV_COLUMNS, row, strict=True))
        event["seq"] = int(event["seq"])
        for name in ("actor", "subject"):
            event[name] = _csv_value(event[name])
        event["data"], plain = decoder.decode(_csv_value(event["data"]))
        yield event, plain and -SAFE_INTEGER <= event["seq"] <= SAFE_INTEGER


def _head_record(line: bytes | None, csv_format: bool) -> dict:
    if not line:
        raise BundleError("the export has no signed head line (it was cut short, or is not an export)")
    text = line.decode("utf-8")
    if csv_format:
        import csv

        row = next(csv.reader([text]), [])
        if len(row) != 2 or row[0] != EXPORT_HEAD_MARK:
            raise BundleError(
                "the export's last line is not its signed head (it was cut short or appended to)"
            )
        return json.loads(row[1])
    record = json.loads(text)
    if not isinstance(record, dict) or EXPORT_HEAD_MARK not in record:
        raise BundleError("the export's last line is not its signed head (it was cut short or appended to)")
    return record[EXPORT_HEAD_MARK]


def verify_export(path, *, jwks: dict) -> Result:
    """Verify a CSV or JSON Lines export against pinned keys, streaming: its head line's signature, that
    the lines before it are exactly the ones signed (sha256 and count), every event's hash, the links
    between consecutive seqs, that nothing lies past the head and that the head's event has the head's
    hash; an export not narrowed to proposals must also have no gaps (from seq 1 without a `since`, up
    to the head without an `until`)."""
    result = Result()
    keys = public_keys(jwks)
    csv_format = str(path).lower().endswith(".csv")
    digest, held = hashlib.sha256(), {"last": None}

    def body(raw) -> Iterator[bytes]:
        for line in raw:  # one line behind: the last line is the head and is not part of the digest
            if held["last"] is not None:
                digest.update(held["last"])
                yield held["last"]
            held["last"] = line

    with open(path, "rb") as raw:
        lines = body(raw)
        events = _csv_events(lines) if csv_format else plain_records(lines)
        checked: list[tuple[int, str]] = []  # (seq, hash) of the previous event only; constant memory
        first_seq = last_seq = None
        gaps = False
        head_chain = None
        for event, plain in events:
            result.events += 1
            seq = event["seq"]
            head_chain = head_chain or event["chain"]
            if event["chain"] != head_chain:
                result.fail(
                    seq, f"event {seq}: belongs to chain {event['chain']}, not {head_chain}", head_chain
                )
            if event_hash(event, plain=plain) != event["hash"]:
                result.fail(
                    seq, f"{event['chain']} event {seq}: content does not match its hash", event["chain"]
                )
            if checked:
                previous_seq, previous_hash = checked[-1]
                if seq <= previous_seq:
                    result.fail(
                        seq, f"{event['chain']} event {seq}: out of order or repeated", event["chain"]
                    )
                elif seq == previous_seq + 1 and event["prev_hash"] != previous_hash:
                    result.fail(
                        seq,
                        f"{event['chain']} event {seq}: prev_hash does not match the previous event's hash",
                        event["chain"],
                    )
                elif seq > previous_seq + 1:
                    gaps = True
            first_seq = seq if first_seq is None else first_seq
            last_seq = seq
            checked[:] = [(seq, event["hash"])]
        head = _head_record(held["last"], csv_format)
    chain = head.get("chain")
    if head.get("format") != EXPORT_HEAD_FORMAT:
        raise BundleError(f"unknown export head format {head.get('format')!r}")
    problem = signature_problem(
        keys, head.get("kid", ""), head.get("signature", ""), export_head_payload(head)
    )
    if problem:
        result.fail(None, f"the export's signed head: {problem}", chain)
        return result
    result.checkpoints += 1
    if head["sha256"] != digest.hexdigest() or head["events"] != result.events:
        result.fail(
            None,
            f"{chain}: the event lines differ from the ones the head signed "
            f"({result.events} lines, the head signed {head['events']}): lines changed, added or removed",
            chain,
        )
    if head_chain is not None and head_chain != chain:
        result.fail(None, f"the events are of chain {head_chain}, the head of {chain}", chain)
    if last_seq is not None and last_seq > head["seq"]:
        result.fail(head["seq"] + 1, f"{chain}: events past the signed head at seq {head['seq']}", chain)
    if checked and checked[-1][0] == head["seq"] and checked[-1][1] != head["hash"]:
        result.fail(head["seq"], f"{chain} event {head['seq']}: its hash is not the signed head's", chain)
    filters = head.get("filters") or {}
    narrowed = any(filters.get(name) for name in ("policy", "agent", "reviewer", "outcome"))
    if not narrowed:
        if gaps:
            result.fail(None, f"{chain}: events are missing between seqs of this unfiltered export", chain)
        if not filters.get("since") and first_seq not in (None, 1):
            result.fail(1, f"{chain}: the export should start at seq 1, it starts at {first_seq}", chain)
        if not filters.get("until") and (last_seq or 0) != head["seq"]:
            result.fail(
                (last_seq or 0) + 1, f"{chain}: the export should reach the head at seq {head['seq']}", chain
            )
    result.notes.append(
        f"export of {chain} cut at seq {head['seq']} ({head['at']}), filters "
        f"{ {k: v for k, v in filters.items() if v} or 'none' }"
    )
    return result
