"""A bundle's event lines: each one is the exact text its hash covers, with the hash appended.

    {"actor":…,"at":…,"chain":…,"data":…,"prev_hash":…,"seq":…,"subject":…,"verb":…,"hash":"sha256:…"}

is the RFC 8785 form of the event's hashed body (hashing.body_bytes) with one more member at its end, so
cutting the fixed-size `,"hash":"sha256:<64 hex>"` off the end (keeping the closing brace) gives the
bytes whose sha256 the hash is. A JSON reader reads the same event as from the `json.dumps` lines earlier
bundles held; a verifier can hash a line's own bytes instead of decoding and encoding it again, which is
most of the time verification took (bench/README.md, R5c).

`linked_run` is that shortcut. It takes lines only while each is in exactly this layout and is the next
event of the chain being verified (its chain, seq and prev_hash read off the text at the places RFC 8785
puts them); at anything else it stops, and the caller decodes that line and checks it the long way
(chains.ChainVerifier.feed), which names what is wrong. It trusts that the body is RFC 8785 text, which
holds when the bytes are the exporter's: audit/verify/bundle.py uses it only on an events.jsonl whose
sha256 the signed manifest names, and verifies again the long way otherwise.
"""

import hashlib
import json
import re
from collections.abc import Container, Iterator

from .hashing import _string, body_bytes, plain_fields

HASH_MEMBER = b',"hash":"sha256:'
SUFFIX_SIZE = len(HASH_MEMBER) + 64 + len(b'"}')  # what follows the body's last value
PREV_HASH_KEY = b',"prev_hash":"'
HASH_TEXT = re.compile(r"sha256:[0-9a-f]{64}")
_STRING = rb'"[^"\\]*(?:\\.[^"\\]*)*"'  # a JSON string (RFC 8785 escapes every '"' and '\' inside it)
# A line's first two members, and its last five from its prev_hash on, in the layout above. The hashes
# are taken as they come: each is compared with a well-formed one (the previous hash, a hexdigest).
_HEAD = re.compile(rb'\{"actor":' + _STRING + rb',"at":' + _STRING, re.DOTALL)
_TAIL = re.compile(
    rb',"prev_hash":"(.{71})","seq":([1-9][0-9]*),"subject":'
    + _STRING
    + rb',"verb":'
    + _STRING
    + rb',"hash":"(sha256:(.{64}))"\}',
    re.DOTALL,
)


def event_line(event: dict) -> bytes:
    """The bundle line of a stored event (its HASHED_FIELDS and its recorded `hash`), without b"\n".
    An event with a float or an integer beyond ±(2**53 - 1) keeps the `json.dumps` line: its RFC 8785
    text could read back as another number (1e17 as the integer 100000000000000000)."""
    if plain_fields(event):
        try:
            body = body_bytes(event, plain=True)
        except ValueError:  # a lone surrogate, which RFC 8785 refuses
            pass
        else:
            recorded = json.dumps(event["hash"], ensure_ascii=False)  # as RFC 8785 writes a string
            return body[:-1] + b',"hash":' + recorded.encode() + b"}"
    return json.dumps(event, ensure_ascii=False).encode()


def bundle_page(page: list[dict]) -> bytes:
    """events.jsonl's lines of a page of events."""
    return b"".join(event_line(event) + b"\n" for event in page)


def chain_member(chain: str) -> bytes:
    """What a line of `chain` holds between its `at` and its `data`."""
    return b',"chain":' + _string(chain).encode() + b',"data":'


def linked_run(
    lines: Iterator[bytes], chain: bytes, seq: int, prev_hash: bytes, stop: Container[int] = ()
) -> tuple[int, bytes, bytes | None]:
    """Take lines while each one is in the layout above, its body hashes to its recorded hash, and it is
    event `seq` (then seq + 1, …) of the chain whose chain_member is `chain`, linked to the one before
    (the first to `prev_hash`, a well-formed hash); stop before a seq in `stop`. Returns (how many were
    taken, the last one's hash, the line it stopped at: None when `lines` ran out).

    Why the fields read here are the event's own: in RFC 8785 text every '"' not escaped delimits a
    string, so the members the patterns match (each key a string, then ':' and its value, separated by
    ',' with no bracket between them) are members of one object, and the '}' that ends the line closes
    the outermost one: the line's last members are its prev_hash, seq, subject, verb and hash, its first
    ones actor and at, then chain. A line that is not RFC 8785 text can fool this reading, which is why
    it is used only on lines the signed manifest vouches for."""
    first, tail_of, head_of, sha256 = seq, _TAIL.fullmatch, _HEAD.match, hashlib.sha256
    for line in lines:
        if seq in stop:
            break
        tail = tail_of(line, max(line.rfind(PREV_HASH_KEY), 0))
        if tail is None or tail[1] != prev_hash or int(tail[2]) != seq:
            break
        head = head_of(line)
        if head is None or not line.startswith(chain, head.end()):
            break
        if sha256(line[: len(line) - SUFFIX_SIZE] + b"}").hexdigest().encode() != tail[4]:
            break
        prev_hash, seq = tail[3], seq + 1
    else:
        return seq - first, prev_hash, None
    return seq - first, prev_hash, line
