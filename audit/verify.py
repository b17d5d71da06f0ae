"""Verify a hash chain without Django: `python -m audit.verify bundle.zip`.

This module must stay importable with no Django settings and no database (compliance runs it offline
on an exported bundle). It repeats the hashing rule of audit/chain.py on purpose: keep the two equal.
"""

import base64
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

import rfc8785

GENESIS_HASH = "sha256:" + "0" * 64


@dataclass
class Result:
    ok: bool = True
    events: int = 0
    checkpoints: int = 0
    problems: list[str] = field(default_factory=list)
    first_bad_seq: int | None = None

    def fail(self, seq: int | None, problem: str) -> None:
        if self.ok:
            self.first_bad_seq = seq
        self.ok = False
        self.problems.append(problem)


def event_hash(event: dict) -> str:
    body = {name: event[name] for name in ("chain", "seq", "at", "actor", "verb", "subject", "data", "prev_hash")}
    return "sha256:" + hashlib.sha256(rfc8785.dumps(body)).hexdigest()


def checkpoint_payload(chain: str, seq: int, head_hash: str, at: str) -> bytes:
    return rfc8785.dumps({"chain": chain, "seq": seq, "hash": head_hash, "at": at})


def verify_events(events: Iterable[dict], *, result: Result | None = None) -> tuple[Result, dict[int, str]]:
    """Check one chain's events in seq order: contiguous seqs from 1, each hash, each link.
    Returns the result and {seq: hash} of the events that verified (for checkpoint checks)."""
    result = result or Result()
    expected_seq, prev_hash = 1, GENESIS_HASH
    hashes: dict[int, str] = {}
    for event in events:
        result.events += 1
        seq = event["seq"]
        where = f"{event['chain']} event {seq}"
        if seq != expected_seq:
            result.fail(seq, f"{where}: expected seq {expected_seq} (events missing or out of order)")
            return result, hashes
        if event["prev_hash"] != prev_hash:
            result.fail(seq, f"{where}: prev_hash does not match the previous event's hash (reordered or removed)")
            return result, hashes
        if event_hash(event) != event["hash"]:
            result.fail(seq, f"{where}: content does not match its hash (the event was changed)")
            return result, hashes
        hashes[seq] = event["hash"]
        prev_hash = event["hash"]
        expected_seq += 1
    return result, hashes


def _public_key(jwk: dict):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    raw = base64.urlsafe_b64decode(jwk["x"] + "=" * (-len(jwk["x"]) % 4))
    return Ed25519PublicKey.from_public_bytes(raw)


def verify_checkpoints(checkpoints: Iterable[dict], hashes: dict[int, str], jwks: dict, result: Result) -> Result:
    """Each checkpoint must be signed by a published key and agree with the chain; a checkpoint past the
    last event proves the tail was truncated."""
    from cryptography.exceptions import InvalidSignature

    keys_by_kid = {jwk["kid"]: jwk for jwk in jwks.get("keys", [])}
    last_seq = max(hashes) if hashes else 0
    for checkpoint in checkpoints:
        result.checkpoints += 1
        seq, where = checkpoint["seq"], f"{checkpoint['chain']} checkpoint at seq {checkpoint['seq']}"
        jwk = keys_by_kid.get(checkpoint["kid"])
        if jwk is None:
            result.fail(seq, f"{where}: signed by unknown key {checkpoint['kid']}")
            continue
        signature = base64.urlsafe_b64decode(checkpoint["signature"] + "=" * (-len(checkpoint["signature"]) % 4))
        try:
            _public_key(jwk).verify(signature, checkpoint_payload(checkpoint["chain"], seq, checkpoint["hash"],
                                                                  checkpoint["at"]))
        except InvalidSignature:
            result.fail(seq, f"{where}: signature does not verify")
            continue
        if seq > last_seq:
            result.fail(last_seq + 1, f"{where}: the chain ends at seq {last_seq}, so events after it were removed")
        elif hashes.get(seq) != checkpoint["hash"]:
            result.fail(seq, f"{where}: the chain's hash at this seq differs from the signed one (rolled back)")
    return result
