"""A bundle's event lines are the RFC 8785 text their hash covers (audit/verify/lines.py), and the
verifier's shortcut that hashes a line's own bytes (lines.linked_run) takes a line only when decoding it
and checking it the long way accepts it too: on hostile events, on a real bundle, on a bundle someone
without the key changed, and on a bundle in the layout earlier versions wrote."""

import hashlib
import json
import zipfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.chain.checkpoints import verification_jwks
from audit.exports import bundles
from audit.exports.lines import jsonl_page
from audit.verify.bundle import verify_bundle
from audit.verify.chains import ChainVerifier, Result
from audit.verify.hashing import SAFE_INTEGER, PlainJson, body_bytes, hash_fields
from audit.verify.lines import SUFFIX_SIZE, chain_member, event_line, linked_run
from tests.audit.util import export_bundle, lifecycle

PREV = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


# Strings made of what the shortcut reads a line by: quotes, backslashes, brackets and the members it
# looks for, with the expected values in them; and JSON values of such strings (floats too).
FRAGMENTS = ['"', "\\", "{", "}", "[", "]", ",", ":", PREV, ',"prev_hash":"', '","seq":5,', '","verb":"']
FRAGMENTS += [',"chain":"tenant:1","data":', ',"hash":"sha256:', "a", "é", "\U0001f600", "\n", "\x00"]
hostile_text = st.one_of(
    st.lists(st.sampled_from(FRAGMENTS), max_size=6).map("".join),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=8),  # no lone surrogate: RFC 8785 refuses it
)
values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-SAFE_INTEGER, SAFE_INTEGER),
        st.floats(allow_nan=False, allow_infinity=False),
        hostile_text,
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(hostile_text, inner, max_size=4)),
    max_leaves=10,
)


def stored(**fields) -> dict:
    """An event as the exporter reads it from the database, with the hash the rule gives it."""
    event = {
        "chain": "tenant:1",
        "seq": 5,
        "at": "2026-12-01T10:15:00.123456Z",
        "actor": "agent:refund-demo",
        "verb": "vote.cast",
        "subject": "proposal:1",
        "data": {"verdict": "approve"},
        "prev_hash": PREV,
    }
    event.update(fields)
    event["hash"] = hash_fields(event)
    return event


def taken(line: bytes, *, chain="tenant:1", seq=5, prev=PREV) -> bool:
    count, _, _ = linked_run(iter([line]), chain_member(chain), seq, prev.encode())
    return count == 1


def accepted_the_long_way(line: bytes, *, chain="tenant:1", seq=5, prev=PREV) -> bool:
    """ChainVerifier.feed of the decoded line, as the next event after `prev`."""
    verifier = ChainVerifier(chain, keys={}, result=Result(), start_seq=seq, start_prev_hash=prev)
    event, plain = PlainJson().decode(line)
    try:
        return verifier.feed(event, plain=plain)
    except (KeyError, TypeError, ValueError):  # a field missing or refused by the hash rule
        return False


def test_a_line_is_the_hashed_text_with_the_hash_appended_and_reads_as_the_same_event():
    event = stored()
    line = event_line(event)
    assert json.loads(line) == event
    assert line[: len(line) - SUFFIX_SIZE] + b"}" == body_bytes(event)
    assert "sha256:" + hashlib.sha256(body_bytes(event)).hexdigest() == event["hash"]
    assert line.endswith(b',"hash":"' + event["hash"].encode() + b'"}')
    assert taken(line) and accepted_the_long_way(line)


@pytest.mark.parametrize(
    "fields",
    [
        # a nested object after the real prev_hash that spells out the expected linkage
        {"prev_hash": OTHER, "seq": {"a": 1, "prev_hash": PREV, "seq": 5, "subject": "s", "verb": "v"}},
        {"prev_hash": OTHER, "data": {"x": {"a": 1, "prev_hash": PREV, "seq": 5, "subject": "s"}}},
        # quotes inside strings that spell out members
        {"prev_hash": OTHER, "subject": f'x","prev_hash":"{PREV}","seq":5,"subject":"s'},
        {"prev_hash": OTHER, "verb": f'v","hash":"{PREV}'},
        {"chain": "tenant:2", "actor": 'x","at":"y","chain":"tenant:1","data":{'},
        {"chain": "tenant:2", "at": 'y","chain":"tenant:1","data":'},
        {"chain": "tenant:2", "actor": {"chain": "tenant:1", "data": 1}},
        # the wrong seq, chain or predecessor
        {"seq": 6},
        {"seq": "5"},
        {"chain": "tenant:2"},
        {"prev_hash": OTHER},
    ],
)
def test_a_hostile_event_is_not_taken_for_the_expected_one(fields):
    line = event_line(stored(**fields))
    assert not accepted_the_long_way(line)
    assert not taken(line)


def test_a_line_whose_hash_does_not_match_its_text_is_not_taken():
    line = event_line(stored()).replace(b'"approve"', b'"rejects"')
    assert not taken(line)
    assert not accepted_the_long_way(line)


@settings(max_examples=500, deadline=None)
@given(
    st.fixed_dictionaries(
        {name: st.one_of(hostile_text, values) for name in ("actor", "at", "subject", "verb", "data")}
    ),
    st.one_of(st.just("tenant:1"), hostile_text),
    st.one_of(st.just(5), values),
)
def test_the_shortcut_takes_a_line_only_when_the_long_way_accepts_it(fields, chain, seq):
    event = stored(chain=chain, seq=seq, **fields)
    line = event_line(event)
    assert json.loads(line) == json.loads(json.dumps(event))
    for expected_chain in {chain, "tenant:1"}:
        if taken(line, chain=expected_chain):
            assert accepted_the_long_way(line, chain=expected_chain)


@pytest.fixture
def bundle(agent, refund_policy, requester, reviewer_a, tenant, tmp_path):
    for _ in range(3):
        lifecycle(agent, reviewer_a)
    return export_bundle(tenant, tmp_path / "acme.zip")


def rewritten(bundle, target, change) -> None:
    """A copy of `bundle` at `target` with events.jsonl changed by `change(lines) -> lines`, by someone
    without the key (the manifest is left as it was)."""
    with zipfile.ZipFile(bundle) as source, zipfile.ZipFile(target, "w") as copy:
        for item in source.infolist():
            content = source.read(item)
            if item.filename == "events.jsonl":
                content = b"\n".join(change(content.split(b"\n")[:-1])) + b"\n"
            copy.writestr(item, content)


@pytest.mark.django_db
def test_every_line_of_a_bundle_is_taken_by_the_shortcut(bundle):
    with zipfile.ZipFile(bundle) as opened:
        lines = opened.read("events.jsonl").split(b"\n")[:-1]
        (segment,) = json.loads(opened.read("manifest.json"))["chains"]
    count, last_hash, stopped_at = linked_run(
        iter(lines), chain_member(segment["chain"]), segment["first_seq"], segment["prev_hash"].encode()
    )
    assert (count, stopped_at) == (len(lines), None)
    assert last_hash.decode() == segment["last_hash"]
    assert verify_bundle(bundle, jwks=verification_jwks()).ok


@pytest.mark.django_db
def test_a_line_rewritten_in_another_layout_is_named_by_its_content_not_by_the_next_link(bundle, tmp_path):
    """The changed line hashes from its own bytes (a space added, its hash recomputed), so the shortcut
    alone would take it and name the next event's prev_hash; the manifest no longer vouches for the file,
    so every line is checked the long way, which names the changed one."""
    changed_seq = 7

    def respace(lines):
        event = json.loads(lines[changed_seq - 1])
        body = body_bytes(event).replace(b'"data":{', b'"data": {', 1)
        recorded = "sha256:" + hashlib.sha256(body).hexdigest()
        lines[changed_seq - 1] = body[:-1] + b',"hash":"' + recorded.encode() + b'"}'
        return lines

    forged = tmp_path / "forged.zip"
    rewritten(bundle, forged, respace)
    with zipfile.ZipFile(forged) as opened:
        line = opened.read("events.jsonl").split(b"\n")[changed_seq - 1]
    previous = json.loads(line)["prev_hash"]
    assert taken(line, chain=json.loads(line)["chain"], seq=changed_seq, prev=previous)
    result = verify_bundle(forged, jwks=verification_jwks())
    assert not result.ok
    assert result.first_bad_seq == changed_seq
    assert f"event {changed_seq}: content does not match its hash" in result.problems[0]
    assert any("events.jsonl: its sha256 differs" in problem for problem in result.problems)


@pytest.mark.django_db
def test_a_bundle_in_the_layout_earlier_versions_wrote_still_verifies(
    agent, refund_policy, requester, reviewer_a, tenant, tmp_path, monkeypatch
):
    lifecycle(agent, reviewer_a)
    monkeypatch.setattr(bundles, "bundle_page", jsonl_page)  # json.dumps lines, keys in column order
    earlier = export_bundle(tenant, tmp_path / "earlier.zip")
    with zipfile.ZipFile(earlier) as opened:
        assert opened.read("events.jsonl").startswith(b'{"chain": "tenant:')
    result = verify_bundle(earlier, jwks=verification_jwks())
    assert result.ok, result.summary()
    changed = tmp_path / "changed.zip"
    rewritten(earlier, changed, lambda lines: [lines[0].replace(b'"agent:', b'"agenT:', 1), *lines[1:]])
    result = verify_bundle(changed, jwks=verification_jwks())
    assert not result.ok and result.first_bad_seq == 1
