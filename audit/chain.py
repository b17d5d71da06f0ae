"""Appending to a hash chain. Call `append()` inside the transaction of the change it records."""

from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max

from audit.hashing import GENESIS_HASH, checkpoint_payload, hash_body
from audit.models import AuditEvent, ChainHead, Checkpoint, PublicKey

SYSTEM_CHAIN = "system"

# Keys that would mean a secret is about to be written into the permanent record. Event data is kept
# for years and exported to third parties, so a caller that passes one of these fails loudly instead.
FORBIDDEN_DATA_KEYS = frozenset(
    {
        "password",
        "otp",
        "otp_code",
        "totp",
        "backup_code",
        "token",
        "api_token",
        "push_token",
        "secret",
        "private_key",
        "authorization",
        "credentials",
        "outbound_auth_credentials",
        "session_key",
    }
)


def chain_for_tenant(tenant_id: int | None) -> str:
    return f"tenant:{tenant_id}" if tenant_id is not None else SYSTEM_CHAIN


def tenant_of_chain(chain: str) -> int | None:
    return int(chain.split(":", 1)[1]) if chain.startswith("tenant:") else None


def format_time(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def event_body(chain, seq, at, actor, verb, subject, data, prev_hash) -> dict:
    """Exactly what an event's hash covers (audit.hashing.HASHED_FIELDS), with `at` in the hashed form."""
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


def refuse_secrets(data, path: str = "data") -> None:
    if isinstance(data, dict):
        for key, value in data.items():
            if str(key).lower() in FORBIDDEN_DATA_KEYS:
                raise ValueError(
                    f"audit event {path}.{key}: secrets, codes and tokens never go into the audit log"
                )
            refuse_secrets(value, f"{path}.{key}")
    elif isinstance(data, list):
        for index, value in enumerate(data):
            refuse_secrets(value, f"{path}[{index}]")


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
    data = data or {}
    refuse_secrets(data)
    head = _locked_head(chain)
    # Microsecond precision survives every database round trip, so the hash can be recomputed.
    at = datetime.now(UTC)
    seq = head.seq + 1
    body = event_body(chain, seq, at, actor, verb, subject, data, head.hash)
    event = AuditEvent.objects.create(
        chain=chain,
        seq=seq,
        at=at,
        actor=actor,
        verb=verb,
        subject=subject,
        data=data,
        prev_hash=head.hash,
        hash=hash_body(body),
    )
    ChainHead.objects.filter(chain=chain).update(seq=seq, hash=event.hash)
    if seq % settings.AUDIT_CHECKPOINT_EVERY == 0:
        write_checkpoint(chain, seq, event.hash)
    return event


def archive_public_key(kid: str) -> None:
    """Keep the public half of a signing key for as long as the checkpoints it signed."""
    from signing_keys import key_by_kid

    if PublicKey.objects.filter(kid=kid).exists():
        return
    key = key_by_kid(kid)
    if key is not None:
        try:
            with transaction.atomic():
                PublicKey.objects.create(kid=kid, jwk=key.public_jwk())
        except IntegrityError:
            pass  # archived meanwhile by another writer


def write_checkpoint(chain: str, seq: int, head_hash: str) -> Checkpoint:
    from signing_keys import sign_bytes

    at = format_time(datetime.now(UTC))
    kid, signature = sign_bytes(checkpoint_payload(chain, seq, head_hash, at))
    archive_public_key(kid)
    try:
        with transaction.atomic():
            return Checkpoint.objects.create(
                chain=chain, seq=seq, hash=head_hash, at=parse_time(at), kid=kid, signature=signature
            )
    except IntegrityError:
        return Checkpoint.objects.get(chain=chain, seq=seq)  # another process signed this head first


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


def write_due_checkpoints(now: datetime | None = None, minutes: int | None = None) -> list[Checkpoint]:
    """Time-based checkpoints: sign every chain whose head moved since its last checkpoint and whose last
    checkpoint is older than `minutes` (settings.AUDIT_CHECKPOINT_MINUTES); a chain never signed counts
    from its first event. Bounds how long a truncation of a quiet chain's tail can go unnoticed.
    Writes nothing when nothing is due (the worker calls this every tick)."""
    now = now or datetime.now(UTC)
    minutes = settings.AUDIT_CHECKPOINT_MINUTES if minutes is None else minutes
    cutoff = now - timedelta(minutes=minutes)
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
            started = AuditEvent.objects.filter(chain=head.chain, seq=1).values_list("at", flat=True).first()
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
