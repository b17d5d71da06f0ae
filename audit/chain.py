"""Appending to a hash chain. Call `append()` inside the transaction of the change it records."""

import hashlib
from datetime import UTC, datetime

import rfc8785
from django.conf import settings
from django.db import IntegrityError, transaction

from audit.models import AuditEvent, ChainHead, Checkpoint

GENESIS_HASH = "sha256:" + "0" * 64
SYSTEM_CHAIN = "system"


def chain_for_tenant(tenant_id: int | None) -> str:
    return f"tenant:{tenant_id}" if tenant_id is not None else SYSTEM_CHAIN


def format_time(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_body(chain, seq, at, actor, verb, subject, data, prev_hash) -> dict:
    """Exactly what an event's hash covers. audit/verify.py repeats this without Django: keep them equal."""
    return {
        "chain": chain,
        "seq": seq,
        "at": at if isinstance(at, str) else format_time(at),
        "actor": actor,
        "verb": str(verb),
        "subject": subject,
        "data": data,
        "prev_hash": prev_hash,
    }


def hash_body(body: dict) -> str:
    return "sha256:" + hashlib.sha256(rfc8785.dumps(body)).hexdigest()


def checkpoint_payload(chain: str, seq: int, head_hash: str, at: str) -> bytes:
    return rfc8785.dumps({"chain": chain, "seq": seq, "hash": head_hash, "at": at})


def _locked_head(chain: str) -> ChainHead:
    try:
        return ChainHead.objects.select_for_update().get(chain=chain)
    except ChainHead.DoesNotExist:
        pass
    try:
        with transaction.atomic():
            ChainHead.objects.create(chain=chain, seq=0, hash=GENESIS_HASH)
    except IntegrityError:
        pass  # another writer created it first; the lock below waits for that writer
    return ChainHead.objects.select_for_update().get(chain=chain)


def append(chain: str, *, actor: str, verb: str, subject: str, data: dict | None = None) -> AuditEvent:
    """Append one event under a lock on the chain head, so concurrent writers never fork the chain."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("audit.append must run inside the transaction of the change it records")
    head = _locked_head(chain)
    # Microsecond precision survives every database round trip, so the hash can be recomputed.
    at = datetime.now(UTC)
    seq = head.seq + 1
    data = data or {}
    body = event_body(chain, seq, at, actor, verb, subject, data, head.hash)
    event = AuditEvent.objects.create(
        chain=chain, seq=seq, at=at, actor=actor, verb=verb, subject=subject, data=data,
        prev_hash=head.hash, hash=hash_body(body),
    )
    ChainHead.objects.filter(chain=chain).update(seq=seq, hash=event.hash)
    if seq % settings.AUDIT_CHECKPOINT_EVERY == 0:
        write_checkpoint(chain, seq, event.hash)
    return event


def write_checkpoint(chain: str, seq: int, head_hash: str) -> Checkpoint:
    from approvals.keys import sign_bytes  # the shared signing-key module, not the approval domain

    at = format_time(datetime.now(UTC))
    kid, signature = sign_bytes(checkpoint_payload(chain, seq, head_hash, at))
    checkpoint, _ = Checkpoint.objects.get_or_create(
        chain=chain, seq=seq,
        defaults={"hash": head_hash, "at": datetime.fromisoformat(at.replace("Z", "+00:00")), "kid": kid,
                  "signature": signature},
    )
    return checkpoint
