"""Verify hash chains without Django:
`python -m audit.verify bundle.zip (--jwks FILE_OR_URL | --trust-bundle-keys) [--previous OLD.zip]`, or
`python -m audit.verify export.csv|export.jsonl --jwks FILE_OR_URL` (a CSV or JSON Lines export ends
with a signed head line: the chain head it was cut at and the sha256 of the lines before it).

The keys must be pinned: a bundle checked only against the keys it carries proves nothing about who
wrote it (whoever rewrote the events could sign with a key of their own and ship that key along), so the
command refuses to run without `--jwks` (the JWKS you trust, a file or an https URL such as Reviewer's
/.well-known/jwks.json) or an explicit `--trust-bundle-keys`.

This module must stay importable with no Django settings and no database (compliance runs it offline
on an exported bundle). The hashing rule comes from audit/verify/hashing.py, which
audit/chain/sequencer.py uses too.

What it checks, streaming (memory does not grow with the number of events):
- every event's hash is sha256 of the RFC 8785 form of {chain, seq, at, actor, verb, subject, data,
  prev_hash}; seqs are contiguous; each prev_hash is the previous event's hash;
- every checkpoint's Ed25519 signature over RFC 8785 {chain, seq, hash, at}, by a known key, and that the
  chain has that hash at that seq (a rewritten or rolled-back chain contradicts it); a checkpoint past
  the last event means the tail was removed;
- for a bundle: the manifest's signature, every file's sha256, that each chain segment starts right after
  a signed checkpoint (or at the genesis) and ends where the manifest says;
- with --previous: that the chain still holds what an earlier bundle held (same hashes at the same seqs,
  never shorter), so an operator cannot quietly rewrite history between two exports.

Exit status: 0 verified, 1 a problem was found (the first bad event is named), 2 the bundle is unreadable.
"""

import base64
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from .hashing import GENESIS_HASH, HASHED_FIELDS, canonical_json, checkpoint_payload, hash_fields
from .lines import HASH_TEXT, chain_member, linked_run

BUNDLE_FORMAT = "reviewer-audit-bundle/1"
# The last line of a CSV or JSON Lines export: its signed head (audit/exports/lines.py head_record).
EXPORT_HEAD_FORMAT = "reviewer-audit-export/1"
EXPORT_HEAD_MARK = "export_head"
CSV_COLUMNS = ("seq", "at", "chain", "actor", "verb", "subject", "data", "prev_hash", "hash")


@dataclass
class Result:
    ok: bool = True
    events: int = 0
    checkpoints: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    first_bad_chain: str | None = None
    first_bad_seq: int | None = None

    def fail(self, seq: int | None, problem: str, chain: str | None = None) -> None:
        """Record a problem. The first bad event is the lowest seq of the first chain that failed."""
        if self.ok or (
            chain == self.first_bad_chain
            and seq is not None
            and (self.first_bad_seq is None or seq < self.first_bad_seq)
        ):
            self.first_bad_chain, self.first_bad_seq = chain, seq
        self.ok = False
        self.problems.append(problem)

    def summary(self) -> str:
        if self.ok:
            return f"OK: {self.events} events and {self.checkpoints} checkpoints verify"
        where = f"{self.first_bad_chain} seq {self.first_bad_seq}" if self.first_bad_seq is not None else "-"
        return f"FAILED: {self.problems[0]} (first bad event: {where})"


EVENT_KEYS = frozenset((*HASHED_FIELDS, "hash"))


def event_hash(event: dict, *, plain: bool = False) -> str:
    """The hash the event's content gives (`plain`: hashing.PlainJson found the event plain)."""
    return hash_fields(event, plain=plain)


def manifest_payload(manifest: dict) -> bytes:
    """What the manifest signature covers: the manifest without its signature, in RFC 8785 form."""
    return canonical_json({key: value for key, value in manifest.items() if key != "signature"})


def export_head_payload(record: dict) -> bytes:
    """What an export's head signature covers: the head record without its kid and signature."""
    return canonical_json({key: value for key, value in record.items() if key not in ("kid", "signature")})


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def public_keys(jwks: dict) -> dict:
    """{kid: Ed25519PublicKey} from a JWKS document; other key types are ignored."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    keys = {}
    for jwk in jwks.get("keys", []):
        if jwk.get("kty") == "OKP" and jwk.get("crv") == "Ed25519" and jwk.get("kid"):
            keys[jwk["kid"]] = Ed25519PublicKey.from_public_bytes(b64url_decode(jwk["x"]))
    return keys


def signature_problem(keys: dict, kid: str, signature: str, payload: bytes) -> str | None:
    from cryptography.exceptions import InvalidSignature

    key = keys.get(kid)
    if key is None:
        return f"signed by unknown key {kid}"
    try:
        key.verify(b64url_decode(signature), payload)
    except (InvalidSignature, ValueError):
        return "signature does not verify"
    return None


class VouchedHashes:
    """Every event hash of one chain that an earlier bundle held, 8 bytes each (the first 8 bytes of the
    sha256: a rewrite that matched them by chance would need 2**64 tries), so a chain of a million events
    costs 8 MB. With it a rewritten event is named exactly, even when every hash after it was recomputed
    and no checkpoint lies between: the first seq whose hash differs."""

    def __init__(self):
        from array import array

        self.first_seq = None
        self.prefixes = array("Q")

    @staticmethod
    def _prefix(hash_: str) -> int:
        return int(hash_.removeprefix("sha256:")[:16], 16)

    def add(self, seq: int, hash_: str) -> None:
        if self.first_seq is None:
            self.first_seq = seq
        if seq != self.first_seq + len(self.prefixes):
            return  # not contiguous: only the contiguous run from the first seq is kept
        self.prefixes.append(self._prefix(hash_))

    def differs(self, seq: int, hash_: str) -> bool:
        if self.first_seq is None or not self.first_seq <= seq < self.first_seq + len(self.prefixes):
            return False
        return self.prefixes[seq - self.first_seq] != self._prefix(hash_)


class ChainVerifier:
    """Verify one chain (or one contiguous segment of it) fed event by event in seq order.

    Only the signed checkpoints are held in memory, so a chain of any length verifies in constant memory.
    `expected` holds {seq: hash} that must be found, vouched for by `expected_source` (an earlier bundle,
    or the checkpoint files kept outside the database)."""

    def __init__(
        self,
        chain: str,
        *,
        keys: dict,
        checkpoints: Iterable[dict] = (),
        result: Result,
        start_seq: int = 1,
        start_prev_hash: str = GENESIS_HASH,
        expected: dict[int, str] | None = None,
        expected_source: str = "the earlier bundle",
        vouched: VouchedHashes | None = None,
    ):
        self.chain, self.result = chain, result
        self.vouched = vouched
        self.expected_source = expected_source
        self.start_seq, self.start_prev_hash = start_seq, start_prev_hash
        self.expected = dict(expected or {})
        self.expected_seqs = sorted(self.expected)
        self.signed: dict[int, str] = {}  # seq -> hash, signature verified
        for checkpoint in checkpoints:
            self._check_signature(checkpoint, keys)
        self.signed_seqs = sorted(self.signed)
        self.watched_seqs = frozenset(self.signed) | frozenset(self.expected)  # feed's slower path
        self.next_seq, self.prev_hash = start_seq, start_prev_hash
        self.last_signed_seen = start_seq - 1
        self.broken = False
        self.chain_member = chain_member(chain)  # for take_lines
        if start_seq > 1 and self.signed.get(start_seq - 1) != start_prev_hash:
            self._fail(
                start_seq,
                f"the segment starting at seq {start_seq} is not anchored: no signed checkpoint "
                f"at seq {start_seq - 1} with hash {start_prev_hash}",
            )

    def _fail(self, seq: int | None, problem: str) -> None:
        self.result.fail(
            seq,
            f"{self.chain} {problem}" if seq is None else f"{self.chain} event {seq}: {problem}",
            self.chain,
        )

    def _check_signature(self, checkpoint: dict, keys: dict) -> None:
        self.result.checkpoints += 1
        seq = checkpoint["seq"]
        problem = signature_problem(
            keys,
            checkpoint["kid"],
            checkpoint["signature"],
            checkpoint_payload(checkpoint["chain"], seq, checkpoint["hash"], checkpoint["at"]),
        )
        if problem:
            self.result.fail(seq, f"{self.chain} checkpoint at seq {seq}: {problem}", self.chain)
        else:
            self.signed[seq] = checkpoint["hash"]

    def feed(self, event: dict, *, plain: bool = False) -> bool:
        """Check one event; returns False once the chain is broken (later events cannot be trusted).
        `plain`: hashing.PlainJson decoded the event and found it plain."""
        # The usual event, in one test: every check of _feed passes and none has more to do. Its keys
        # are read in _feed's order, so a malformed event fails (or raises) there as it always did.
        if (
            not self.broken
            and event["chain"] == self.chain
            and event["seq"] == self.next_seq
            and event["prev_hash"] == self.prev_hash
            and self.vouched is None
            and event["seq"] not in self.watched_seqs
            and hash_fields(event, plain=plain) == event["hash"]
        ):
            self.result.events += 1
            self.prev_hash = event["hash"]
            self.next_seq += 1
            return True
        return self._feed(event, plain=plain)

    def take_lines(self, lines: Iterator[bytes]) -> bytes | None:
        """feed() of the bundle lines that come next, without decoding them (lines.linked_run), while each
        is the next event and no check of _feed has more to do. Returns the first line not taken, to
        decode and feed() (None: there are no more)."""
        if self.broken or self.vouched is not None or not HASH_TEXT.fullmatch(self.prev_hash):
            return next(lines, None)
        taken, last_hash, line = linked_run(
            lines, self.chain_member, self.next_seq, self.prev_hash.encode(), self.watched_seqs
        )
        if taken:
            self.result.events += taken
            self.next_seq += taken
            self.prev_hash = last_hash.decode()
        return line

    def _feed(self, event: dict, *, plain: bool) -> bool:
        """feed() of an event that fails a check, or is at a signed or expected seq."""
        if self.broken:
            return False
        self.result.events += 1
        seq = event["seq"]
        if event["chain"] != self.chain:
            problem = f"belongs to chain {event['chain']}, not {self.chain}"
        elif seq != self.next_seq:
            problem = (
                f"expected seq {self.next_seq}: events {self.next_seq}..{seq - 1} are missing"
                if seq > self.next_seq
                else f"expected seq {self.next_seq}: events out of order or repeated"
            )
            seq = self.next_seq if seq > self.next_seq else seq
        elif event["prev_hash"] != self.prev_hash:
            problem = (
                "prev_hash does not match the previous event's hash (events reordered, removed or inserted)"
            )
        elif event_hash(event, plain=plain) != event["hash"]:
            problem = "content does not match its hash (the event was changed)"
        elif self.vouched is not None and self.vouched.differs(seq, event["hash"]):
            problem = (
                "differs from the earlier bundle, which holds another hash for this event: it was "
                "rewritten here (and every hash after it recomputed)"
            )
        elif seq in self.signed and self.signed[seq] != event["hash"]:
            seq = self.last_signed_seen + 1
            problem = (
                f"the chain differs from the checkpoint signed at seq {event['seq']}: events "
                f"{seq}..{event['seq']} were rewritten (hashes recomputed) or rolled back"
            )
        elif seq in self.expected and self.expected[seq] != event["hash"]:
            seq = self.last_signed_seen + 1
            problem = (
                f"differs from {self.expected_source}, which holds another hash at seq {event['seq']}: "
                f"events {seq}..{event['seq']} were rewritten (hashes recomputed) or rolled back"
            )
        else:
            problem = None
        if problem:
            self._fail(seq, problem)
            self.broken = True
            return False
        if seq in self.signed or seq in self.expected:
            self.last_signed_seen = seq
        self.prev_hash = event["hash"]
        self.next_seq += 1
        return True

    @property
    def last_seq(self) -> int:
        return self.next_seq - 1

    def finish(
        self, *, expected_last: tuple[int, str] | None = None, head: tuple[int, str] | None = None
    ) -> Result:
        """End of the events. `expected_last` is where the segment must end; `head` is the chain head when
        the events were read (checkpoints beyond the segment are checked against it). Without `head`, any
        signed checkpoint past the last event means events were removed."""
        if self.broken:
            return self.result
        last_seq, last_hash = self.last_seq, self.prev_hash
        if expected_last is not None and (last_seq, last_hash) != tuple(expected_last):
            want_seq, want_hash = expected_last
            if last_seq < want_seq:
                self._fail(
                    last_seq + 1,
                    f"missing: the chain should go on to seq {want_seq} "
                    f"(events {last_seq + 1}..{want_seq} were removed)",
                )
            elif last_seq > want_seq:
                self._fail(want_seq + 1, f"unexpected: the chain should end at seq {want_seq}")
            else:
                self._fail(last_seq, f"the last event's hash is not {want_hash} as recorded")
            return self.result
        limit_seq, limit_hash = head if head is not None else (last_seq, last_hash)
        for seq in self.signed_seqs:
            if seq <= last_seq:
                continue
            if seq > limit_seq:
                self._fail(
                    last_seq + 1 if head is None else limit_seq + 1,
                    f"a checkpoint signed the chain at seq {seq}, but it ends at {limit_seq}: "
                    f"events after {limit_seq} were removed (truncated or rolled back)",
                )
                return self.result
            if seq == limit_seq and self.signed[seq] != limit_hash:
                self._fail(seq, "the chain head differs from the checkpoint signed at this seq (rolled back)")
                return self.result
        beyond = [seq for seq in self.expected_seqs if seq > max(last_seq, limit_seq)]
        if beyond:
            self._fail(
                max(last_seq, limit_seq) + 1,
                f"{self.expected_source} holds this chain up to seq {beyond[-1]}, "
                f"now it ends at {max(last_seq, limit_seq)} (events were removed)",
            )
        return self.result
