"""Verifying an audit bundle offline: the manifest's signature, every file's digest, each chain segment from a
signed checkpoint, and (with --previous) that an earlier bundle's history still holds."""

import hashlib
import json
import zipfile
from collections.abc import Iterable, Iterator

from .chains import (
    BUNDLE_FORMAT,
    ChainVerifier,
    Result,
    VouchedHashes,
    manifest_payload,
    public_keys,
    signature_problem,
)
from .hashing import PlainJson, checkpoint_payload

# --------------------------------------------------------------------------------------------------
# Bundles


class BundleError(Exception):
    """The bundle cannot be read at all (not a zip, no manifest, unknown format)."""


BLOCK = 1 << 20  # bytes read from a zip member at once


class _HashedBlocks:
    """Iterate a zip member's bytes in blocks while computing its sha256 and size."""

    def __init__(self, raw):
        self.raw, self.digest, self.size = raw, hashlib.sha256(), 0

    def __iter__(self) -> Iterator[bytes]:
        for block in iter(lambda: self.raw.read(BLOCK), b""):
            self.digest.update(block)
            self.size += len(block)
            yield block

    def hexdigest(self) -> str:
        """The sha256 of the whole member (what was not read yet is read now)."""
        for _ in self:
            pass
        return self.digest.hexdigest()


def every_line(blocks: Iterable[bytes]) -> Iterator[bytes]:
    """The lines of a stream given in blocks, blank ones too, without their b"\n" (reading blocks is
    several times faster than a zip member's readline)."""
    pieces: list[bytes] = []  # a line's start, held over from earlier blocks
    for block in blocks:
        lines = block.split(b"\n")
        if pieces:
            pieces.append(lines[0])
            lines[0] = b"".join(pieces)
        pieces = [lines.pop()]
        yield from lines
    rest = b"".join(pieces)
    if rest:
        yield rest


def split_lines(blocks: Iterable[bytes]) -> Iterator[bytes]:
    """The non-blank lines of a stream given in blocks, as iterating the binary file gives them (but
    without their b"\n")."""
    return (line for line in every_line(blocks) if line.strip())


def _member_digest(bundle: zipfile.ZipFile, name: str) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with bundle.open(name) as raw:
        for block in iter(lambda: raw.read(1 << 16), b""):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def read_manifest(bundle: zipfile.ZipFile) -> dict:
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


def jsonl_records(lines: Iterable[bytes]) -> Iterator[dict]:
    for line in lines:
        if line.strip():
            yield json.loads(line)


def plain_records(lines: Iterable[bytes]) -> Iterator[tuple[dict, bool]]:
    """(record, whether it is plain) of each line: json.loads of it, and hashing.PlainJson's word."""
    decoder = PlainJson()
    for line in lines:
        if line.strip():
            yield decoder.decode(line)


def block_records(blocks: Iterable[bytes]) -> Iterator[tuple[dict, bool]]:
    """plain_records(split_lines(blocks)), the same records, but each block's complete lines decoded
    together (hashing.PlainJson.decode_lines): a block's text is made once, not a line at a time."""
    decoder = PlainJson()
    held: list[bytes] = []  # the start of a line, from earlier blocks
    for block in blocks:
        cut = block.rfind(b"\n") + 1
        if not cut:
            held.append(block)
            continue
        if held:
            held.append(block[:cut])
            chunk = b"".join(held)
        else:
            chunk = block[:cut] if cut < len(block) else block
        held = [block[cut:]] if cut < len(block) else []
        yield from decoder.decode_lines(chunk)
    rest = b"".join(held)
    if rest:
        yield from decoder.decode_lines(rest)


def _checkpoints_by_chain(bundle: zipfile.ZipFile) -> dict[str, list[dict]]:
    by_chain: dict[str, list[dict]] = {}
    with bundle.open("checkpoints.jsonl") as raw:
        for checkpoint in jsonl_records(raw):
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
        manifest = read_manifest(bundle)
        with bundle.open("events.jsonl") as raw:
            blocks = _HashedBlocks(raw)
            for event in jsonl_records(split_lines(blocks)):
                vouched.setdefault(event["chain"], VouchedHashes()).add(event["seq"], event["hash"])
            events_digest = blocks.hexdigest()
        if manifest.get("files", {}).get("events.jsonl", {}).get("sha256") != events_digest:
            result.notes.append(
                "the earlier bundle's events.jsonl is not the one its manifest signed: ignored"
            )
            vouched = {}
    return expected, vouched


def _earlier_checkpoints(path: str, keys: dict, result: Result) -> dict[str, dict[int, str]]:
    """{chain: {seq: hash}} that an earlier bundle vouches for: its checkpoints and its segments' ends."""
    with zipfile.ZipFile(path) as bundle:
        manifest = read_manifest(bundle)
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
    """Verify a bundle written by audit/exports/bundles.py. `jwks` pins the keys to trust; without it the
    keys in the bundle are used (which proves integrity against the exporter's keys, not who the exporter
    was).

    With pinned keys and no `previous` (whose every hash is compared, so each line is decoded anyway),
    event lines in the layout of audit/verify/lines.py are checked by hashing their own bytes
    (lines.linked_run), which trusts that they are the exporter's RFC 8785 text. That holds only
    if the manifest's signature verifies and names this events.jsonl's sha256; when either fails, the
    lines may be anyone's, and every line is checked again the long way (decoded, encoded by the hash
    rule), which names the first bad event."""
    quick = jwks is not None and previous is None
    result, trusted = _verify(path, jwks=jwks, previous=previous, quick=quick)
    if trusted:
        return result
    return _verify(path, jwks=jwks, previous=previous, quick=False)[0]


def _verify(path, *, jwks: dict | None, previous: str | None, quick: bool) -> tuple[Result, bool]:
    """(verify_bundle's result, whether it stands): a quick reading stands only where the signed manifest
    vouches for the bytes of events.jsonl."""
    result = Result()
    try:
        bundle = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as error:
        raise BundleError(f"{path} is not a readable zip file: {error}") from None
    with bundle:
        manifest = read_manifest(bundle)
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
        segments = {segment["chain"]: segment for segment in manifest.get("chains", [])}
        chains = _Segments(segments, _checkpoints_by_chain(bundle), keys, result, expected, vouched)
        with bundle.open("events.jsonl") as raw:
            blocks = _HashedBlocks(raw)
            if quick:
                decoder, lines = PlainJson(), every_line(blocks)
                line = next(lines, None)
                while line is not None:
                    if line.strip() and not chains.feed(*decoder.decode(line)):
                        break
                    line = chains.take_lines(lines)
            else:
                for event, plain in block_records(blocks):
                    if not chains.feed(event, plain):
                        break
            events_digest = blocks.hexdigest()
        chains.finish()
        signed_events = files.get("events.jsonl", {}).get("sha256") == events_digest
        if not signed_events:
            result.fail(
                None,
                "events.jsonl: its sha256 differs from the manifest (events were changed, added or removed)",
            )
        for chain, segment in segments.items():
            if chain not in chains.seen and segment.get("last_seq"):
                result.fail(
                    segment["first_seq"],
                    f"{chain}: the manifest lists events "
                    f"{segment['first_seq']}..{segment['last_seq']} but the bundle "
                    "holds none",
                    chain,
                )
    return result, not quick or (not problem and signed_events)


class _Segments:
    """The chain segments of a bundle's events.jsonl, verified as its events come: one ChainVerifier per
    chain the manifest announces, in the order the lines hold them (each chain's events together)."""

    def __init__(self, segments: dict, checkpoints: dict, keys: dict, result: Result, expected, vouched):
        self.segments, self.checkpoints, self.keys, self.result = segments, checkpoints, keys, result
        self.expected, self.vouched = expected, vouched
        self.seen: set[str] = set()
        self.verifier: ChainVerifier | None = None

    def take_lines(self, lines: Iterator[bytes]) -> bytes | None:
        """The current chain's ChainVerifier.take_lines (the next line, when no chain has begun)."""
        return next(lines, None) if self.verifier is None else self.verifier.take_lines(lines)

    def feed(self, event: dict, plain: bool) -> bool:
        """Feed one decoded event; False once the events are not grouped as the manifest says (stop)."""
        chain = event.get("chain")
        if self.verifier is None or chain != self.verifier.chain:
            self.finish()
            if not isinstance(chain, str) or chain not in self.segments or chain in self.seen:
                self.result.fail(
                    event.get("seq"),
                    f"{chain}: events not announced by the manifest, or not grouped by chain",
                    chain,
                )
                return False
            self.seen.add(chain)
            segment = self.segments[chain]
            self.verifier = ChainVerifier(
                chain,
                keys=self.keys,
                checkpoints=self.checkpoints.get(chain, ()),
                result=self.result,
                start_seq=segment["first_seq"],
                start_prev_hash=segment["prev_hash"],
                expected=self.expected.get(chain),
                vouched=self.vouched.get(chain),
            )
        self.verifier.feed(event, plain=plain)
        return True

    def finish(self) -> None:
        """End the current chain's segment where the manifest says it ends."""
        if self.verifier is None:
            return
        segment = self.segments[self.verifier.chain]
        expected_last = (segment["last_seq"], segment["last_hash"]) if segment["last_seq"] else None
        self.verifier.finish(
            expected_last=expected_last, head=(segment["head"]["seq"], segment["head"]["hash"])
        )
        self.verifier = None
