"""The hashing and signing rules of the audit chain, in one Django-free module.

audit/chain/sequencer.py (writing, inside Django) and audit/verify/ (checking, offline without Django) both
import these, so the rule a verifier checks is the rule the writer applied. Keep this module free of
Django imports: `python -m audit.verify` must run on a compliance laptop with no settings.

The rule is RFC 8785 (JCS). The `rfc8785` package is its reference here; it is pure Python (about 30 µs
an event), so a value made only of what the standard library's C JSON encoder writes exactly as RFC 8785
does is encoded by that encoder instead (about 5 µs), and everything else by `rfc8785`:

- strings: both escape exactly `"`, `\\` and U+0000..U+001F, with the same short forms (\\b \\t \\n \\f
  \\r) and lowercase `\\u00xx` for the other control characters; both write everything else (`/`, DEL,
  U+2028, U+2029, non-ASCII) as its UTF-8 bytes. A lone surrogate cannot be encoded as UTF-8: such a
  value goes to `rfc8785`, which refuses it;
- integers within ±(2**53 - 1), booleans and null: the same text (outside that range `rfc8785` refuses);
- arrays, and objects with string keys: Python sorts keys by code point, RFC 8785 by UTF-16 code unit;
  the orders differ only between a character outside the Basic Multilingual Plane and one of
  U+E000..U+FFFF, so text with any character outside the BMP goes to `rfc8785`;
- floats (`1.0` is `1` in RFC 8785, `1.0` in Python), NaN and infinities, tuples, subclasses (an enum
  member) and every other type go to `rfc8785`, which writes or refuses them as before.
tests/audit/test_hashing.py compares both encodings on every event shape of the trail and on hostile
values.
"""

import hashlib
import json
import math
import re
from collections.abc import Iterator
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

import rfc8785

GENESIS_HASH = "sha256:" + "0" * 64
# What an event's hash covers, in this order of fields (RFC 8785 sorts keys anyway).
HASHED_FIELDS = ("chain", "seq", "at", "actor", "verb", "subject", "data", "prev_hash")

SAFE_INTEGER = 2**53 - 1  # RFC 8785's integers: what an IEEE 754 double holds exactly
_OUTSIDE_BMP = re.compile("[\U00010000-\U0010ffff]")


def _no_default(value):
    raise TypeError(f"not plain JSON: {type(value).__name__}")


_string = encode_basestring  # a JSON string as the encoder below writes it (the C function when there is one)

if c_make_encoder is not None:
    _chunks = c_make_encoder(None, _no_default, encode_basestring, None, ":", ",", True, False, False)

    def _compact(value: Any) -> str:
        return "".join(_chunks(value, 0))

else:  # an interpreter without the C accelerator: the same text, slower
    _encoder = json.JSONEncoder(
        sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False, check_circular=False
    )

    def _compact(value: Any) -> str:
        return _encoder.encode(value)


def _plain(value) -> bool:
    """Whether `value` holds only exact dicts with string keys, lists, strings, booleans, None and
    integers within ±SAFE_INTEGER: the values whose compact sorted JSON is their RFC 8785 form (apart
    from the characters canonical_json checks)."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return -SAFE_INTEGER <= value <= SAFE_INTEGER
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or not _plain(item):
                return False
        return True
    if kind is list:
        for item in value:
            if not _plain(item):
                return False
        return True
    return False


def canonical_json(value, *, plain: bool = False) -> bytes:
    """The RFC 8785 form of `value`. `plain=True` is the caller's word that `value` came from
    `PlainJson.decode` and was found plain there (so it need not be walked again)."""
    if plain or _plain(value):
        text = _compact(value)
        if text.isascii():
            return text.encode()
        if not _OUTSIDE_BMP.search(text):  # else keys may sort otherwise in UTF-16
            try:
                return text.encode()
            except UnicodeEncodeError:  # a lone surrogate, which rfc8785 refuses
                pass
    return rfc8785.dumps(value)


def canonical_digest(value) -> str:
    """`sha256:` + hex sha256 of the RFC 8785 form of `value`: the one digest rule of Reviewer (event
    hashes here; action digests through approvals.canonical; the agent-side gate keeps its own copy
    because it imports nothing of ours)."""
    return "sha256:" + hashlib.sha256(canonical_json(value)).hexdigest()


def hash_body(body: dict, *, plain: bool = False) -> str:
    """The hash of an event body holding exactly HASHED_FIELDS (`plain`: as for canonical_json)."""
    if body.keys() == _FIELD_SET:
        return hash_fields(body, plain=plain)
    return "sha256:" + hashlib.sha256(canonical_json(body, plain=plain)).hexdigest()


_FIELD_SET = frozenset(HASHED_FIELDS)
# The body's keys in RFC 8785's order (all ASCII: UTF-16 and code point order agree), and its text
# written by hand around the values: the C encoder's sort of eight keys cost more than the rest.
_BODY_KEYS = tuple(sorted(HASHED_FIELDS))
assert _BODY_KEYS == ("actor", "at", "chain", "data", "prev_hash", "seq", "subject", "verb")


def _body_text(event: dict) -> str:
    """The compact sorted JSON text of the HASHED_FIELDS of `event` (which _plain must hold of each
    of them), as _compact writes the body dict: the eight keys in their sorted order, each value as
    the C encoder writes it (a str by the encoder's own string function, an int by int's repr, which
    is what the encoder writes for an exact int)."""
    actor, at, chain, subject, verb, prev = (
        event["actor"],
        event["at"],
        event["chain"],
        event["subject"],
        event["verb"],
        event["prev_hash"],
    )
    seq = event["seq"]
    if (
        type(actor) is str
        and type(at) is str
        and type(chain) is str
        and type(subject) is str
        and type(verb) is str
        and type(prev) is str
        and type(seq) is int
    ):
        return (
            f'{{"actor":{_string(actor)},"at":{_string(at)},"chain":{_string(chain)},'
            f'"data":{_compact(event["data"])},"prev_hash":{_string(prev)},"seq":{seq},'
            f'"subject":{_string(subject)},"verb":{_string(verb)}}}'
        )
    return _compact({name: event[name] for name in HASHED_FIELDS})  # unusual types: the encoder sorts


def hash_fields(event: dict, *, plain: bool = False) -> str:
    """The hash of the body made of `event`'s HASHED_FIELDS (other keys, such as its recorded `hash`,
    are ignored): hash_body of that body, without building it. `plain`: PlainJson decoded `event` and
    found it plain."""
    return "sha256:" + hashlib.sha256(body_bytes(event, plain=plain)).hexdigest()


def plain_fields(event: dict) -> bool:
    """Whether every HASHED_FIELDS value of `event` is plain (_plain): its RFC 8785 text reads back as
    the same value (no float, no integer beyond ±SAFE_INTEGER)."""
    return all(_plain(event[name]) for name in HASHED_FIELDS)


def body_bytes(event: dict, *, plain: bool = False) -> bytes:
    """The RFC 8785 form of the body made of `event`'s HASHED_FIELDS: the bytes its hash covers (and the
    start of its bundle line, audit/verify/lines.py). Raises as rfc8785 does on a value it refuses."""
    if plain or plain_fields(event):
        text = _body_text(event)
        if text.isascii() or not _OUTSIDE_BMP.search(text):  # else keys may sort otherwise in UTF-16
            try:
                return text.encode()
            except UnicodeEncodeError:  # a lone surrogate, which rfc8785 refuses
                pass
    return rfc8785.dumps({name: event[name] for name in HASHED_FIELDS})


def checkpoint_payload(chain: str, seq: int, head_hash: str, at: str) -> bytes:
    """What a checkpoint's Ed25519 signature covers."""
    return canonical_json({"chain": chain, "seq": seq, "hash": head_hash, "at": at})


class PlainJson:
    """`json.loads` of one line, as the reference reads it, telling also whether the value is plain: it
    holds no float, NaN, infinity or integer beyond ±SAFE_INTEGER (JSON gives no other type, and object
    keys are strings), so canonical_json may skip walking it. One instance per reader (not shared
    between threads)."""

    def __init__(self) -> None:
        self._unusual = False
        # scan_once (what JSONDecoder.decode runs, without its two whitespace matches) is set by
        # JSONDecoder.__init__ but missing from typeshed's stub.
        self._scan = json.JSONDecoder(
            parse_float=self._float, parse_int=self._int, parse_constant=self._constant
        ).scan_once  # type: ignore[attr-defined]

    def _float(self, text: str) -> float:
        self._unusual = True
        return float(text)

    def _int(self, text: str) -> int:
        value = int(text)
        if not -SAFE_INTEGER <= value <= SAFE_INTEGER:
            self._unusual = True
        return value

    def _constant(self, name: str) -> float:
        self._unusual = True
        return float(name)  # "NaN", "Infinity", "-Infinity", as json.loads reads them

    def decode(self, line: bytes | str) -> tuple[Any, bool]:
        """(json.loads(line), whether it is plain)."""
        self._unusual = False
        try:
            text = line.decode() if isinstance(line, bytes) else line
            value, end = self._scan(text, 0)
            if end == len(text):
                return value, not self._unusual
        except (ValueError, StopIteration):
            pass
        # Not one JSON value as Reviewer writes it (space around it, a BOM, another encoding, invalid):
        # json.loads decides, with its encoding detection and its own error.
        return json.loads(line), False

    def decode_lines(self, chunk: bytes) -> Iterator[tuple[Any, bool]]:
        """decode() of each non-blank line of `chunk` (lines ending in b"\n", the last one too), as
        `decode(line) for line in chunk.split(b"\n") if line.strip()` gives them, but with the chunk
        decoded from UTF-8 once and each value scanned in place: a value is taken only where it ends
        exactly at its line's end (the first "\n" after its start), so a line holds exactly one value,
        as decode() requires. Any other line goes through decode() on its own bytes."""
        try:
            text = chunk.decode()
        except UnicodeDecodeError:  # some line is not UTF-8: each line on its own, as decode() reads it
            for line in chunk.split(b"\n"):
                if line.strip():
                    yield self.decode(line)
            return
        scan, find, size, pos = self._scan, text.find, len(text), 0
        while pos < size:
            end_of_line = find("\n", pos)
            if end_of_line == pos:  # an empty line
                pos += 1
                continue
            if end_of_line < 0:  # the chunk's last line had no b"\n" after all
                end_of_line = size
            self._unusual = False
            try:
                value, end = scan(text, pos)
            except (ValueError, StopIteration):
                end = -1
            if end == end_of_line:
                yield value, not self._unusual
            else:  # space around the value, a BOM, two values, a value across lines, invalid: decode()
                line = text[pos:end_of_line].encode()  # the line's bytes again (the chunk was UTF-8)
                if line.strip():
                    yield self.decode(line)
            pos = end_of_line + 1


def first_inexact_number(value, path: str = "") -> tuple[str, int | float] | None:
    """(where, number) of the first number in `value` that the hash rule cannot take as it will be read
    back: an integer beyond ±SAFE_INTEGER, or a float that is not finite or beyond it (PostgreSQL's
    jsonb stores 1e21 as the integer 10**21). Data stored as JSON and hashed or digested later (audit
    events, the policy fields they record, an agent's action) is checked with this first."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return (path, value) if abs(value) > SAFE_INTEGER else None
    if isinstance(value, float):
        return (path, value) if not math.isfinite(value) or abs(value) > SAFE_INTEGER else None
    if isinstance(value, dict):
        items = ((f"{path}.{key}" if path else str(key), item) for key, item in value.items())
    elif isinstance(value, list | tuple):
        items = ((f"{path}[{index}]", item) for index, item in enumerate(value))
    else:
        return None
    for where, item in items:
        found = first_inexact_number(item, where)
        if found:
            return found
    return None
