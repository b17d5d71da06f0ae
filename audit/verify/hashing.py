"""The hashing and signing rules of the audit chain, in one Django-free module.

audit/chain.py (writing, inside Django) and audit/verify/ (checking, offline without Django) both
import these, so the rule a verifier checks is the rule the writer applied. Keep this module free of
Django imports: `python -m audit.verify` must run on a compliance laptop with no settings.
"""

import hashlib

import rfc8785

GENESIS_HASH = "sha256:" + "0" * 64
# What an event's hash covers, in this order of fields (RFC 8785 sorts keys anyway).
HASHED_FIELDS = ("chain", "seq", "at", "actor", "verb", "subject", "data", "prev_hash")


def canonical_digest(value) -> str:
    """`sha256:` + hex sha256 of the RFC 8785 form of `value`: the one digest rule of Reviewer (event
    hashes here; action digests through approvals.canonical; the agent-side gate keeps its own copy
    because it imports nothing of ours)."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(value)).hexdigest()


def hash_body(body: dict) -> str:
    """The hash of an event body holding exactly HASHED_FIELDS."""
    return canonical_digest(body)


def checkpoint_payload(chain: str, seq: int, head_hash: str, at: str) -> bytes:
    """What a checkpoint's Ed25519 signature covers."""
    return rfc8785.dumps({"chain": chain, "seq": seq, "hash": head_hash, "at": at})
