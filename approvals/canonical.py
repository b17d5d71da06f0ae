"""Canonical JSON (RFC 8785) and the action digest that binds a decision to one exact action."""

import rfc8785

from audit.verify.hashing import canonical_digest


def canonical_bytes(value) -> bytes:
    """RFC 8785 (JCS) bytes. Raises rfc8785.CanonicalizationError for values JSON cannot carry."""
    return rfc8785.dumps(value)


def digest_of(value) -> str:
    return canonical_digest(value)


def action_digest(action: dict) -> str:
    """`sha256:` + hex sha256 of the RFC 8785 form of the action object (DESIGN.md "Binding")."""
    return digest_of(action)


def manifest_digest(member_digests: list[str]) -> str:
    """A batch's manifest digest: `sha256:` + hex sha256 of the RFC 8785 form of the JSON list of its
    members' action digests, in the batch's order (docs/agents/batches.md; sdk/vectors/manifests.json)."""
    return digest_of(list(member_digests))
