"""Audit bundles: a zip of a selection's chain segments, their checkpoints and a signed manifest, which
`python -m audit.verify` checks offline (exports.py writes the CSV and JSON Lines exports)."""

import hashlib
import json
import os
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from audit.chain.checkpoints import archive_public_key, verification_jwks, write_checkpoint
from audit.chain.records import checkpoint_dict, event_pages
from audit.chain.sequencer import make_seals_durable, sequence_chain
from audit.exports import verifier_wheel
from audit.exports.lines import Selection
from audit.models import AuditEvent, ChainHead, Checkpoint
from audit.people import display_names, pseudonyms_in
from audit.shapes import format_time
from audit.verify.chains import BUNDLE_FORMAT, manifest_payload
from audit.verify.hashing import GENESIS_HASH
from audit.verify.lines import bundle_page
from lib import base64url

# --------------------------------------------------------------------------------------------------
# The verifiable bundle


@dataclass
class Segment:
    """The contiguous part of a chain a bundle holds: from right after a signed checkpoint (or the
    genesis) to the last event of the period."""

    chain: str
    first_seq: int
    last_seq: int
    prev_hash: str
    last_hash: str
    anchor: dict | None
    head: dict

    def manifest_entry(self, events: int) -> dict:
        return {**asdict(self), "events": events}


def bundle_segment(selection: Selection) -> Segment:
    chain = selection.chain
    head_row = ChainHead.objects.filter(chain=chain).first()
    head_seq = selection.up_to_seq if selection.up_to_seq is not None else (head_row.seq if head_row else 0)
    head_event = AuditEvent.objects.chained(chain).filter(seq=head_seq).values_list("hash", flat=True).first()
    head_hash = head_event or (head_row.hash if head_row and head_row.seq == head_seq else GENESIS_HASH)
    period = selection.period_events()
    if selection.until:
        # The period ends before the head: its last event is where the segment must end.
        last = period.order_by("-seq").values_list("seq", "hash").first() or (0, GENESIS_HASH)
    else:
        # Open-ended: the segment must reach the head; missing tail events then show as missing.
        last = (head_seq, head_hash)
    first_in_period = period.order_by("seq").values_list("seq", flat=True).first()
    if first_in_period is None:
        first_in_period = last[0] + 1
    anchor = (
        Checkpoint.objects.filter(chain=chain, seq__lt=first_in_period, seq__lte=head_seq)
        .order_by("-seq")
        .first()
    )
    return Segment(
        chain=chain,
        first_seq=(anchor.seq + 1) if anchor else 1,
        last_seq=last[0],
        prev_hash=anchor.hash if anchor else GENESIS_HASH,
        last_hash=last[1],
        anchor=checkpoint_dict(anchor) if anchor else None,
        head={"seq": head_seq, "hash": head_hash},
    )


def bundle_checkpoints(segment: Segment) -> list[dict]:
    """The checkpoints inside the segment (from its anchor on), and the latest one overall: a latest
    checkpoint past the head proves a truncation even when the segment ends earlier."""
    checkpoints = Checkpoint.objects.filter(
        chain=segment.chain, seq__gte=segment.first_seq - 1, seq__lte=segment.last_seq
    )
    rows = [checkpoint_dict(c) for c in checkpoints.order_by("seq")]
    latest = Checkpoint.objects.filter(chain=segment.chain).order_by("-seq").first()
    if latest is not None and latest.seq > segment.last_seq:
        rows.append(checkpoint_dict(latest))
    return rows


BUNDLE_README = """Reviewer audit bundle ({format})

Verify it offline, with no database and no Reviewer checkout. Install the verifier from the Reviewer
that made this bundle (the package in sdk/verify/ of Reviewer's repository; no package index has it):

    pip install {wheel}

    reviewer-verify {name} --jwks {jwks}  # pin the keys Reviewer publishes
    reviewer-verify {name} --jwks saved-jwks.json --previous earlier-bundle.zip  # not rewritten since
    reviewer-verify {name} --trust-bundle-keys   # the keys inside: proves integrity, not authorship

(In a checkout of Reviewer, `python -m audit.verify` takes the same arguments.)

events.jsonl       one event per line, in chain and seq order: actor, at, chain, data, prev_hash, seq,
                   subject, verb, hash. hash = "sha256:" + hex sha256 of the RFC 8785 (JCS) form of the event
                   without "hash"; prev_hash is the hash of the event before (genesis: sha256:000...0).
                   Each line is that RFC 8785 text with ,"hash":"sha256:..." added before its last "}}".
checkpoints.jsonl  signed chain heads: Ed25519 over RFC 8785 {{chain, seq, hash, at}}, key id "kid".
keys.json          the public keys (JWKS) of every key that signed a checkpoint or the manifest.
manifest.json      what this bundle holds, every file's sha256, and an Ed25519 signature over the RFC 8785
                   form of the manifest without "signature".
"""


def write_bundle(
    selection: Selection, path: Path, *, created_by: str, download_name: str = ""
) -> Iterator[int]:
    """Write the verifiable zip to `path`; yields how many events are written after each page."""
    import signing_keys as keys

    sequence_chain(selection.chain)  # an open-ended bundle reaches everything committed
    segment = bundle_segment(selection)
    make_seals_durable(segment.chain)  # what the bundle is cut at is on disk before any of it leaves
    if (
        segment.head["seq"]
        and not Checkpoint.objects.filter(chain=segment.chain, seq=segment.head["seq"]).exists()
    ):
        # Every bundle carries a signed checkpoint of the head it was cut at (and so does the checkpoint
        # file outside the database): a later rewrite of anything up to here contradicts both.
        write_checkpoint(segment.chain, segment.head["seq"], segment.head["hash"])
    signing_key = keys.active_key()
    archive_public_key(signing_key.kid)
    path = Path(path)
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        events_path = Path(scratch) / "events.jsonl"
        digest, size, written, mentioned = hashlib.sha256(), 0, 0, set()
        events = AuditEvent.objects.chained(segment.chain).filter(
            seq__gte=segment.first_seq, seq__lte=segment.last_seq
        )
        with events_path.open("wb") as out:
            for page in event_pages(events, after_seq=segment.first_seq - 1):
                block = bundle_page(page)
                out.write(block)
                digest.update(block)
                size += len(block)
                written += len(page)
                mentioned |= pseudonyms_in(page)
                yield written
        checkpoints_bytes = "".join(json.dumps(c) + "\n" for c in bundle_checkpoints(segment)).encode()
        keys_bytes = json.dumps(verification_jwks(), indent=2).encode()
        manifest = {
            "format": BUNDLE_FORMAT,
            "created_at": format_time(timezone.now()),
            "created_by": created_by,
            "issuer": settings.REVIEWER_ISSUER,
            "tenant": {
                "id": selection.tenant_id,
                "slug": selection.tenant_slug,
                "name": selection.tenant_name,
            },
            "period": {"since": selection.filters()["since"], "until": selection.filters()["until"]},
            "note": "the bundle holds the whole chain segment of the period (filters do not apply), "
            "so that every link can be checked",
            "chains": [segment.manifest_entry(written)],
            "files": {
                "events.jsonl": {"sha256": digest.hexdigest(), "bytes": size, "lines": written},
                "checkpoints.jsonl": {
                    "sha256": hashlib.sha256(checkpoints_bytes).hexdigest(),
                    "bytes": len(checkpoints_bytes),
                },
                "keys.json": {"sha256": hashlib.sha256(keys_bytes).hexdigest(), "bytes": len(keys_bytes)},
            },
            "hash_rule": "sha256(RFC 8785 of {chain, seq, at, actor, verb, subject, data, prev_hash})",
            "checkpoint_rule": "Ed25519 over RFC 8785 of {chain, seq, hash, at}",
            # Names of the pseudonyms in the events, as the directory knows them now (not hashed: an
            # erased person is absent from later bundles, and every event still verifies).
            "people": display_names(mentioned),
        }
        signature = signing_key.signer().sign(manifest_payload(manifest))
        manifest["signature"] = {"alg": "EdDSA", "kid": signing_key.kid, "value": base64url.encode(signature)}
        partial = path.with_name(path.name + ".part")
        with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
            bundle.writestr("manifest.json", json.dumps(manifest, indent=2))
            bundle.write(events_path, "events.jsonl")
            bundle.writestr("checkpoints.jsonl", checkpoints_bytes)
            bundle.writestr("keys.json", keys_bytes)
            bundle.writestr(
                "README.txt",
                BUNDLE_README.format(
                    format=BUNDLE_FORMAT,
                    name=download_name or path.name.removesuffix(".part"),
                    jwks=f"{settings.REVIEWER_ISSUER.rstrip('/')}/.well-known/jwks.json",
                    wheel=verifier_wheel.install_url(),
                ),
            )
        os.replace(partial, path)
