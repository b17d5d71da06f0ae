"""Verify hash chains without Django:
`python -m audit.verify bundle.zip (--jwks FILE_OR_URL | --trust-bundle-keys) [--previous OLD.zip]`, or
`python -m audit.verify export.csv|export.jsonl --jwks FILE_OR_URL` (a CSV or JSON Lines export ends
with a signed head line: the chain head it was cut at and the sha256 of the lines before it).

The keys must be pinned: a bundle checked only against the keys it carries proves nothing about who
wrote it (whoever rewrote the events could sign with a key of their own and ship that key along), so the
command refuses to run without `--jwks` (the JWKS you trust, a file or an https URL such as Reviewer's
/.well-known/jwks.json) or an explicit `--trust-bundle-keys`.

This module must stay importable with no Django settings and no database (compliance runs it offline
on an exported bundle). The hashing rule comes from audit/hashing.py, which audit/chain.py uses too.

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

import argparse
import base64
import hashlib
import io
import json
import sys
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import rfc8785

from audit.hashing import GENESIS_HASH, HASHED_FIELDS, checkpoint_payload, hash_body

BUNDLE_FORMAT = "reviewer-audit-bundle/1"
# The last line of a CSV or JSON Lines export: its signed head (audit/exports.py head_record).
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


def event_hash(event: dict) -> str:
    return hash_body({name: event[name] for name in HASHED_FIELDS})


def manifest_payload(manifest: dict) -> bytes:
    """What the manifest signature covers: the manifest without its signature, in RFC 8785 form."""
    return rfc8785.dumps({key: value for key, value in manifest.items() if key != "signature"})


def export_head_payload(record: dict) -> bytes:
    """What an export's head signature covers: the head record without its kid and signature."""
    return rfc8785.dumps({key: value for key, value in record.items() if key not in ("kid", "signature")})


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
        self.next_seq, self.prev_hash = start_seq, start_prev_hash
        self.last_signed_seen = start_seq - 1
        self.broken = False
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

    def feed(self, event: dict) -> bool:
        """Check one event; returns False once the chain is broken (later events cannot be trusted)."""
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
        elif event_hash(event) != event["hash"]:
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


# --------------------------------------------------------------------------------------------------
# Bundles


class BundleError(Exception):
    """The bundle cannot be read at all (not a zip, no manifest, unknown format)."""


class _HashingLines:
    """Iterate the lines of a zip member while computing its sha256 and size."""

    def __init__(self, raw):
        self.raw, self.digest, self.size, self.lines = raw, hashlib.sha256(), 0, 0

    def __iter__(self) -> Iterator[bytes]:
        for line in self.raw:
            self.digest.update(line)
            self.size += len(line)
            self.lines += 1
            yield line


def _member_digest(bundle: zipfile.ZipFile, name: str) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with bundle.open(name) as raw:
        for block in iter(lambda: raw.read(1 << 16), b""):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def _read_manifest(bundle: zipfile.ZipFile) -> dict:
    try:
        manifest = json.loads(bundle.read("manifest.json"))
    except KeyError:
        raise BundleError("no manifest.json in the bundle") from None
    except ValueError as error:
        raise BundleError(f"manifest.json is not JSON: {error}") from None
    if manifest.get("format") != BUNDLE_FORMAT:
        raise BundleError(
            f"unknown bundle format {manifest.get('format')!r} (this verifier reads {BUNDLE_FORMAT})"
        )
    return manifest


def _jsonl(lines: Iterable[bytes]) -> Iterator[dict]:
    for line in lines:
        if line.strip():
            yield json.loads(line)


def _checkpoints_by_chain(bundle: zipfile.ZipFile) -> dict[str, list[dict]]:
    by_chain: dict[str, list[dict]] = {}
    with bundle.open("checkpoints.jsonl") as raw:
        for checkpoint in _jsonl(raw):
            by_chain.setdefault(checkpoint["chain"], []).append(checkpoint)
    return by_chain


def earlier_hashes(
    path, keys: dict, result: Result
) -> tuple[dict[str, dict[int, str]], dict[str, VouchedHashes]]:
    """What an earlier bundle vouches for: {chain: {seq: hash}} of its checkpoints and its segments' ends,
    and {chain: VouchedHashes} of every event it holds (when its events.jsonl is the one its signed
    manifest names)."""
    expected = _earlier_checkpoints(path, keys, result)
    vouched: dict[str, VouchedHashes] = {}
    if not result.ok:
        return expected, vouched
    with zipfile.ZipFile(path) as bundle:
        manifest = _read_manifest(bundle)
        with bundle.open("events.jsonl") as raw:
            lines = _HashingLines(raw)
            for event in _jsonl(lines):
                vouched.setdefault(event["chain"], VouchedHashes()).add(event["seq"], event["hash"])
        if manifest.get("files", {}).get("events.jsonl", {}).get("sha256") != lines.digest.hexdigest():
            result.notes.append(
                "the earlier bundle's events.jsonl is not the one its manifest signed: ignored"
            )
            vouched = {}
    return expected, vouched


def _earlier_checkpoints(path: str, keys: dict, result: Result) -> dict[str, dict[int, str]]:
    """{chain: {seq: hash}} that an earlier bundle vouches for: its checkpoints and its segments' ends."""
    with zipfile.ZipFile(path) as bundle:
        manifest = _read_manifest(bundle)
        signature = manifest.get("signature", {})
        problem = signature_problem(
            keys, signature.get("kid", ""), signature.get("value", ""), manifest_payload(manifest)
        )
        if problem:
            result.fail(None, f"the earlier bundle's manifest: {problem}")
            return {}
        expected: dict[str, dict[int, str]] = {}
        for chain, checkpoints in _checkpoints_by_chain(bundle).items():
            for checkpoint in checkpoints:
                if not signature_problem(
                    keys,
                    checkpoint["kid"],
                    checkpoint["signature"],
                    checkpoint_payload(chain, checkpoint["seq"], checkpoint["hash"], checkpoint["at"]),
                ):
                    expected.setdefault(chain, {})[checkpoint["seq"]] = checkpoint["hash"]
        for segment in manifest.get("chains", []):
            if segment.get("last_seq"):
                expected.setdefault(segment["chain"], {})[segment["last_seq"]] = segment["last_hash"]
    return expected


def verify_bundle(path, *, jwks: dict | None = None, previous: str | None = None) -> Result:
    """Verify a bundle written by audit/exports.py. `jwks` pins the keys to trust; without it the keys in
    the bundle are used (which proves integrity against the exporter's keys, not who the exporter was)."""
    result = Result()
    try:
        bundle = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as error:
        raise BundleError(f"{path} is not a readable zip file: {error}") from None
    with bundle:
        manifest = _read_manifest(bundle)
        if jwks is None:
            jwks = json.loads(bundle.read("keys.json"))
            result.notes.append(
                "keys: taken from the bundle (--trust-bundle-keys); pass --jwks with keys you obtained "
                "independently to also prove who signed it"
            )
        else:
            result.notes.append("keys: pinned by --jwks")
        keys = public_keys(jwks)

        signature = manifest.get("signature", {})
        problem = signature_problem(
            keys, signature.get("kid", ""), signature.get("value", ""), manifest_payload(manifest)
        )
        if problem:
            result.fail(None, f"manifest: {problem} (the manifest or a file list was changed)")
        files = manifest.get("files", {})
        for name in ("checkpoints.jsonl", "keys.json"):
            digest, size = _member_digest(bundle, name)
            if files.get(name, {}).get("sha256") != digest:
                result.fail(None, f"{name}: its sha256 differs from the manifest (the file was changed)")

        expected, vouched = earlier_hashes(previous, keys, result) if previous else ({}, {})
        checkpoints = _checkpoints_by_chain(bundle)
        segments = {segment["chain"]: segment for segment in manifest.get("chains", [])}
        seen_chains: set[str] = set()
        verifier: ChainVerifier | None = None

        def finish(current: ChainVerifier) -> None:
            segment = segments[current.chain]
            expected_last = (segment["last_seq"], segment["last_hash"]) if segment["last_seq"] else None
            current.finish(
                expected_last=expected_last, head=(segment["head"]["seq"], segment["head"]["hash"])
            )

        with bundle.open("events.jsonl") as raw:
            lines = _HashingLines(raw)
            for event in _jsonl(lines):
                chain = event.get("chain")
                if verifier is None or chain != verifier.chain:
                    if verifier is not None:
                        finish(verifier)
                    if chain not in segments or chain in seen_chains:
                        result.fail(
                            event.get("seq"),
                            f"{chain}: events not announced by the manifest, or not grouped by chain",
                            chain,
                        )
                        verifier = None
                        break
                    seen_chains.add(chain)
                    segment = segments[chain]
                    verifier = ChainVerifier(
                        chain,
                        keys=keys,
                        checkpoints=checkpoints.get(chain, ()),
                        result=result,
                        start_seq=segment["first_seq"],
                        start_prev_hash=segment["prev_hash"],
                        expected=expected.get(chain),
                        vouched=vouched.get(chain),
                    )
                verifier.feed(event)
        if verifier is not None:
            finish(verifier)
        if files.get("events.jsonl", {}).get("sha256") != lines.digest.hexdigest():
            result.fail(
                None,
                "events.jsonl: its sha256 differs from the manifest (events were changed, added or removed)",
            )
        for chain, segment in segments.items():
            if chain not in seen_chains and segment.get("last_seq"):
                result.fail(
                    segment["first_seq"],
                    f"{chain}: the manifest lists events "
                    f"{segment['first_seq']}..{segment['last_seq']} but the bundle "
                    "holds none",
                    chain,
                )
    return result


# --------------------------------------------------------------------------------------------------
# CSV and JSON Lines exports: events, then one signed head line


def _csv_value(cell: str) -> str:
    """Undo the export's formula guard (a leading ' before = + - @ tab or CR)."""
    return cell[1:] if cell[:1] == "'" and cell[1:2] in ("=", "+", "-", "@", "\t", "\r") else cell


def _csv_events(lines: Iterable[bytes]) -> Iterator[dict]:
    import csv

    rows = csv.reader(line.decode("utf-8") for line in lines)
    if next(rows, None) != list(CSV_COLUMNS):
        raise BundleError("not a Reviewer CSV export: its header differs")
    for row in rows:
        event = dict(zip(CSV_COLUMNS, row, strict=True))
        event["seq"] = int(event["seq"])
        for name in ("actor", "subject"):
            event[name] = _csv_value(event[name])
        event["data"] = json.loads(_csv_value(event["data"]))
        yield event


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
        events = _csv_events(lines) if csv_format else _jsonl(lines)
        checked = []  # (seq, hash) of the previous event only; constant memory
        first_seq = last_seq = None
        gaps = False
        head_chain = None
        for event in events:
            result.events += 1
            seq = event["seq"]
            head_chain = head_chain or event["chain"]
            if event["chain"] != head_chain:
                result.fail(
                    seq, f"event {seq}: belongs to chain {event['chain']}, not {head_chain}", head_chain
                )
            if event_hash(event) != event["hash"]:
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


def _describe(manifest: dict) -> list[str]:
    lines = []
    tenant = manifest.get("tenant") or {}
    period = manifest.get("period") or {}
    lines.append(
        f"bundle of {tenant.get('slug', '?')} exported {manifest.get('created_at')} by "
        f"{manifest.get('created_by')} from {manifest.get('issuer')}"
    )
    lines.append(f"period: {period.get('since') or 'start'} .. {period.get('until') or 'export time'}")
    for segment in manifest.get("chains", []):
        lines.append(
            f"{segment['chain']}: events {segment['first_seq']}..{segment['last_seq']}, "
            f"head at export {segment['head']['seq']}"
        )
    return lines


def load_jwks(source: str) -> dict:
    """A JWKS document from a file or an http(s) URL."""
    if source.startswith(("https://", "http://")):
        from urllib.request import urlopen

        with urlopen(source, timeout=30) as response:  # noqa: S310 (the scheme is checked just above)
            return json.load(response)
    with open(source, "rb") as file:
        return json.load(file)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m audit.verify",
        description="Verify a Reviewer audit bundle offline (no database, no Django).",
    )
    parser.add_argument(
        "bundle", help="the bundle zip exported by Reviewer, or a CSV / JSON Lines export (needs --jwks)"
    )
    keys = parser.add_mutually_exclusive_group()
    keys.add_argument(
        "--jwks",
        metavar="FILE_OR_URL",
        help="the public keys you trust: a JWKS file (e.g. saved from Reviewer's /.well-known/jwks.json) "
        "or its https URL",
    )
    keys.add_argument(
        "--trust-bundle-keys",
        action="store_true",
        help="use the keys inside the bundle: proves the bundle is intact, not who wrote it",
    )
    parser.add_argument(
        "--previous", help="an earlier bundle of the same tenant: the chain must still hold it"
    )
    args = parser.parse_args(argv)
    if not args.jwks and not args.trust_bundle_keys:
        parser.error(
            "the signing keys are not pinned: pass --jwks FILE_OR_URL with the keys you trust "
            "(e.g. https://reviewer.example/.well-known/jwks.json), or --trust-bundle-keys to accept the "
            "keys inside the bundle (which proves integrity, not authorship)"
        )
    out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", errors="replace", line_buffering=True)
    if not zipfile.is_zipfile(args.bundle):
        return _main_export(args, out)
    try:
        jwks = load_jwks(args.jwks) if args.jwks else None
        with zipfile.ZipFile(args.bundle) as bundle:
            description = _describe(_read_manifest(bundle))
        result = verify_bundle(args.bundle, jwks=jwks, previous=args.previous)
    except (BundleError, OSError, ValueError, KeyError, zipfile.BadZipFile) as error:
        print(f"cannot read the bundle: {error}", file=out)
        return 2
    for line in description + result.notes:
        print(line, file=out)
    for problem in result.problems:
        print(f"problem: {problem}", file=out)
    print(result.summary(), file=out)
    return 0 if result.ok else 1


def _main_export(args, out) -> int:
    """A CSV or JSON Lines export: it carries no keys, so only --jwks can pin them."""
    if not args.jwks:
        print(
            "an export carries no keys: pass --jwks FILE_OR_URL with the keys you trust "
            "(e.g. https://reviewer.example/.well-known/jwks.json)",
            file=out,
        )
        return 2
    try:
        result = verify_export(args.bundle, jwks=load_jwks(args.jwks))
    except (BundleError, OSError, ValueError, KeyError, TypeError) as error:
        print(f"cannot read the export: {error}", file=out)
        return 2
    for line in result.notes:
        print(line, file=out)
    for problem in result.problems:
        print(f"problem: {problem}", file=out)
    print(result.summary(), file=out)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
