"""Signed checkpoints: a chain head signed with the active Ed25519 key (every AUDIT_CHECKPOINT_EVERY
events by the sequencer, every AUDIT_CHECKPOINT_SECONDS for a chain whose head moved, and at the head
of every bundle), each also appended to its file outside the database (checkpoint_files.py), and the
archive of every public key that signed one (the verification JWKS)."""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from audit.chain import checkpoint_files
from audit.models import AuditEvent, ChainHead, Checkpoint, PublicKey
from audit.shapes import format_time, parse_time
from audit.verify.hashing import checkpoint_payload


def archive_public_key(kid: str, using: str = DEFAULT_DB_ALIAS) -> None:
    """Keep the public half of a signing key for as long as the checkpoints it signed."""
    from signing_keys import key_by_kid

    if PublicKey.objects.using(using).filter(kid=kid).exists():
        return
    key = key_by_kid(kid)
    if key is not None:
        try:
            with transaction.atomic(using=using):
                PublicKey.objects.using(using).create(kid=kid, jwk=key.public_jwk())
        except IntegrityError:
            pass  # archived meanwhile by another writer


def write_checkpoint(chain: str, seq: int, head_hash: str, using: str = DEFAULT_DB_ALIAS) -> Checkpoint:
    from signing_keys import sign_bytes

    at = format_time(timezone.now())
    kid, signature = sign_bytes(checkpoint_payload(chain, seq, head_hash, at))
    archive_public_key(kid, using)
    checkpoints = Checkpoint.objects.using(using)
    try:
        with transaction.atomic(using=using):
            checkpoint = checkpoints.create(
                chain=chain, seq=seq, hash=head_hash, at=parse_time(at), kid=kid, signature=signature
            )
    except IntegrityError:
        return checkpoints.get(chain=chain, seq=seq)  # another process signed this head first
    # Outside the database too, once the checkpoint is committed (never a line for a rolled-back head).
    transaction.on_commit(lambda: checkpoint_files.write(checkpoint), using=using)
    return checkpoint


def checkpoint_head(chain: str) -> Checkpoint | None:
    """Sign the chain's committed head now (no-op when it is already signed or the chain is empty)."""
    head = ChainHead.objects.filter(chain=chain).first()
    if head is None or head.seq == 0:
        return None
    existing = Checkpoint.objects.filter(chain=chain, seq=head.seq).first()
    if existing:
        return existing
    with transaction.atomic():
        return write_checkpoint(chain, head.seq, head.hash)


def write_due_checkpoints(now: datetime | None = None, seconds: int | None = None) -> list[Checkpoint]:
    """Time-based checkpoints: sign every chain whose head moved since its last checkpoint and whose last
    checkpoint is older than `seconds` (settings.AUDIT_CHECKPOINT_SECONDS); a chain never signed counts
    from its first event. Bounds the unsigned tail of a quiet chain (what a database owner could rewrite
    or remove unnoticed). Writes nothing when nothing is due (the worker calls this every tick)."""
    now = now or timezone.now()
    seconds = settings.AUDIT_CHECKPOINT_SECONDS if seconds is None else seconds
    cutoff = now - timedelta(seconds=seconds)
    latest = {
        row["chain"]: row
        for row in Checkpoint.objects.values("chain").annotate(last_seq=Max("seq"), last_at=Max("at"))
    }
    written = []
    for head in ChainHead.objects.filter(seq__gt=0):
        last = latest.get(head.chain)
        if last is not None:
            due = last["last_seq"] < head.seq and last["last_at"] <= cutoff
        else:
            started = (
                AuditEvent.objects.chained(head.chain).filter(seq=1).values_list("at", flat=True).first()
            )
            due = started is None or started <= cutoff
        if due:
            checkpoint = checkpoint_head(head.chain)
            if checkpoint is not None:
                written.append(checkpoint)
    return written


def verification_jwks() -> dict:
    """Public keys to check checkpoints with: every archived key plus the keys on disk now."""
    import signing_keys as keys

    by_kid = {row.kid: row.jwk for row in PublicKey.objects.all()}
    for key in keys.all_keys():
        by_kid.setdefault(key.kid, key.public_jwk())
    return {"keys": [by_kid[kid] for kid in sorted(by_kid)]}
