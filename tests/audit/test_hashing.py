"""The audit hash rule is RFC 8785 whichever encoder writes it: the C-accelerated JSON encoder where its
bytes are RFC 8785's, `rfc8785` everywhere else. Compared on every event shape of a real trail, on
hostile strings and keys, and on a trail hashed by `rfc8785` alone (as every existing chain was)."""

import base64
import hashlib
import json
import math

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.models import AuditEvent
from audit.verify.bundle import plain_records, split_lines
from audit.verify.chains import (
    EXPORT_HEAD_FORMAT,
    ChainVerifier,
    Result,
    export_head_payload,
)
from audit.verify.export import verify_export
from audit.verify.hashing import (
    GENESIS_HASH,
    HASHED_FIELDS,
    SAFE_INTEGER,
    PlainJson,
    canonical_json,
    hash_body,
)
from tests.audit.util import lifecycle


def reference(value) -> bytes | type:
    """RFC 8785 as the `rfc8785` package writes it, or the type of its refusal."""
    try:
        return rfc8785.dumps(value)
    except Exception as error:  # noqa: BLE001 (the refusal's type is what is compared)
        return type(error)


def ours(value, **kwargs) -> bytes | type:
    try:
        return canonical_json(value, **kwargs)
    except Exception as error:  # noqa: BLE001
        return type(error)


def old_hash(body: dict) -> str:
    """The hash rule as every existing chain was written: `rfc8785` alone."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(body)).hexdigest()


# Characters where JSON encoders are known to differ: controls, quote, backslash, solidus, DEL, the line
# and paragraph separators, the BOM, both sides of the surrogate range, lone surrogates, the private use
# area against characters outside the BMP (which UTF-16 sorts before it), the largest code point.
AWKWARD = [chr(c) for c in range(0x20)] + list('"\\/\x7f\x80\u00a0\u2028\u2029\ufeff\ufffe\uffff')
AWKWARD += ["\ud7ff", "\ud800", "\udbff", "\udc00", "\udfff", "\ue000", "\uf8ff", "\U00010000"]
AWKWARD += ["\U0001f600", "\U0010ffff", "é", "ß", "中", "a", "Z", "0", " "]
hostile_text = st.text(
    alphabet=st.one_of(st.sampled_from(AWKWARD), st.characters(exclude_categories=())), max_size=12
)
integers = st.one_of(
    st.integers(min_value=-SAFE_INTEGER - 3, max_value=SAFE_INTEGER + 3),
    st.sampled_from(
        [0, -1, SAFE_INTEGER, -SAFE_INTEGER, SAFE_INTEGER + 1, -SAFE_INTEGER - 1, 2**64, -(2**70)]
    ),
)
scalars = st.one_of(
    st.none(), st.booleans(), integers, hostile_text, st.floats(allow_nan=True, allow_infinity=True)
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(hostile_text, inner, max_size=4),
        st.dictionaries(st.one_of(hostile_text, st.integers(), st.none()), inner, max_size=3),
    ),
    max_leaves=12,
)


@settings(max_examples=1000, deadline=None)
@given(values)
def test_any_value_encodes_as_rfc8785_writes_it_or_is_refused_alike(value):
    assert ours(value) == reference(value)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.text(alphabet=st.sampled_from(AWKWARD), max_size=3), st.integers(0, 9), max_size=6))
def test_keys_sort_by_utf16_code_units_even_outside_the_basic_multilingual_plane(value):
    assert ours(value) == reference(value)


def test_every_code_point_in_a_string_and_in_a_key_encodes_as_rfc8785_writes_it():
    surrogates = range(0xD800, 0xE000)
    for start in range(0, 0x110000, 0x400):
        block = "".join(chr(c) for c in range(start, start + 0x400) if c not in surrogates)
        for value in (block, {block: block, "k": [block]}):
            assert canonical_json(value) == rfc8785.dumps(value), hex(start)
    for code in surrogates:  # alone they are not UTF-8: both refuse
        assert ours(chr(code)) == reference(chr(code)) == rfc8785.CanonicalizationError


def test_what_the_fast_encoder_must_not_write_goes_to_rfc8785():
    assert canonical_json(1.0) == b"1" and canonical_json({"n": 1e21}) == b'{"n":1e+21}'
    assert canonical_json([SAFE_INTEGER]) == str([SAFE_INTEGER]).encode()
    for refused in (SAFE_INTEGER + 1, -SAFE_INTEGER - 1, math.nan, math.inf, {1: 2}, {"a": b"x"}):
        assert issubclass(ours(refused), rfc8785.CanonicalizationError)
    assert canonical_json({"\ue000": 1, "\U00010000": 2}) == '{"\U00010000":2,"\ue000":1}'.encode()


@settings(max_examples=800, deadline=None)
@given(values, st.booleans())
def test_decoded_json_is_read_as_json_loads_reads_it_and_encoded_alike(value, ascii_only):
    try:
        text = json.dumps(value, ensure_ascii=ascii_only)
    except (TypeError, ValueError):
        return  # not JSON at all (a key JSON cannot carry)
    line = text.encode("utf-8", "surrogatepass")
    decoded, plain = PlainJson().decode(line)
    expected = json.loads(line)
    assert json.dumps(decoded) == json.dumps(expected)
    assert ours(decoded, plain=plain) == reference(expected)


@pytest.mark.parametrize(
    "line",
    [b'{"a":1.0}', b'{"a":NaN}', b"[Infinity]", b'{"a":9007199254740992}', b"[-9007199254740992]", b"1e400"],
)
def test_a_decoded_float_constant_or_large_integer_is_not_plain(line):
    assert PlainJson().decode(line)[1] is False


@pytest.mark.parametrize(
    "line", [b'\xef\xbb\xbf{"a":1}', '{"a":"é"}'.encode("utf-16"), b'{"a":"\xed\xa0\x80"}']
)
def test_a_line_that_is_not_plain_utf8_is_read_by_json_loads(line):
    assert PlainJson().decode(line) == (json.loads(line), False)


def test_lines_split_across_blocks_are_read_whole():
    text = b'{"a":1}\n\n{"b":"x y"}\r\n \n{"c":3}'
    expected = [line.rstrip(b"\n") for line in text.splitlines(keepends=True) if line.strip()]
    for size in range(1, len(text) + 1):
        blocks = [text[i : i + size] for i in range(0, len(text), size)]
        assert list(split_lines(blocks)) == expected


# A trail whose data holds what events carry and what the fast encoder must hand over to rfc8785.
OLD_TRAIL_DATA = [
    {"via": "push", "tool": "payments.refund", "supersedes": None, "rev": 2, "ok": True},
    {
        "policies": [{"id": "refunds", "version": 1}],
        "requirements": {"thresholds": [{"group": "g", "count": 1}]},
    },
    {"reason": 'quote " backslash \\ slash / tab \t nul \x00 del \x7f \u2028\u2029', "n": -SAFE_INTEGER},
    {"amount": 12.5, "ratio": 1e-7, "whole": 3.0, "big": 1e21},
    {"\ue000": "private use", "\U0001f600": "outside the BMP", "é": "é", "a": "a"},
    {"note": "emoji \U0001f600 and 中文 and \ufeff", "list": [[], {}, [None, False]]},
    {},
]


def old_trail(chain="tenant:1") -> list[dict]:
    events, prev = [], GENESIS_HASH
    for seq, data in enumerate(OLD_TRAIL_DATA * 3, start=1):
        body = {
            "chain": chain,
            "seq": seq,
            "at": f"2026-01-01T00:00:{seq:02d}.000001Z",
            "actor": "agent:refund-demo" if seq % 2 else "=person:1",
            "verb": "proposal.submitted",
            "subject": f"proposal:{seq}",
            "data": data,
            "prev_hash": prev,
        }
        prev = old_hash(body)
        events.append({**body, "hash": prev})
    return events


def test_a_trail_hashed_by_rfc8785_alone_still_verifies_event_by_event():
    events = old_trail()
    lines = [json.dumps(event, ensure_ascii=False).encode() for event in events]
    result = Result()
    verifier = ChainVerifier("tenant:1", keys={}, result=result)
    for event, plain in plain_records(lines):
        assert hash_body({name: event[name] for name in HASHED_FIELDS}) == event["hash"]
        assert verifier.feed(event, plain=plain)
    verifier.finish()
    assert result.ok and result.events == len(events)


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_an_export_of_a_trail_hashed_by_rfc8785_alone_still_verifies(fmt, tmp_path):
    from audit.exports.lines import csv_header, csv_page, head_line, jsonl_page

    events = old_trail()
    body = (csv_header() + csv_page(events)) if fmt == "csv" else jsonl_page(events)
    key = Ed25519PrivateKey.generate()
    record = {
        "format": EXPORT_HEAD_FORMAT,
        "chain": "tenant:1",
        "seq": events[-1]["seq"],
        "hash": events[-1]["hash"],
        "at": "2026-01-02T00:00:00.000000Z",
        "events": len(events),
        "sha256": hashlib.sha256(body).hexdigest(),
        "filters": {},
        "people": {},
        "kid": "k1",
    }
    signature = base64.urlsafe_b64encode(key.sign(export_head_payload(record))).rstrip(b"=").decode()
    path = tmp_path / f"old.{fmt}"
    path.write_bytes(body + head_line(fmt, {**record, "signature": signature}))
    public = key.public_key().public_bytes_raw()
    jwks = {
        "keys": [
            {"kty": "OKP", "crv": "Ed25519", "kid": "k1", "x": base64.urlsafe_b64encode(public).decode()}
        ]
    }
    result = verify_export(path, jwks=jwks)
    assert result.ok, result.problems
    assert result.events == len(events)


@pytest.mark.django_db
def test_every_event_a_lifecycle_writes_is_hashed_as_rfc8785_alone_would_hash_it(
    agent, refund_policy, requester, reviewer_a, reviewer_b, any_code
):
    lifecycle(agent, reviewer_a)
    lifecycle(agent, reviewer_b, verdict="reject")
    lifecycle(agent, reviewer_a, outcome="failed")
    events = list(AuditEvent.objects.filter(seal__isnull=False))
    assert len({event.verb for event in events}) >= 6
    for event in events:
        body = event.hashed_fields()
        assert canonical_json(body) == rfc8785.dumps(body)
        assert event.hash == old_hash(body)
