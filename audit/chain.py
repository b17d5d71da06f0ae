"""Accept, then sequence (as Certificate Transparency logs do).

`append()` runs inside the transaction of the change it records and only inserts the event, with `seq`,
`prev_hash` and `hash` empty: no lock, so a tenant's writes never queue behind one another.
`sequence_chain()` chains what has committed: in one short transaction it locks the chain head, takes
the chain's unsequenced events in id order, gives each its seq, prev_hash and hash, moves the head and
signs a checkpoint every AUDIT_CHECKPOINT_EVERY events. It runs right after each appending transaction
commits (`transaction.on_commit`, in that process) and on every worker tick (`sequence_pending()`), for
an event whose process died between its commit and its sequencing.
"""

import logging
import threading
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Max
from django.utils import timezone

from audit import checkpoint_files
from audit.hashing import GENESIS_HASH, checkpoint_payload, hash_body
from audit.models import AuditEvent, ChainHead, Checkpoint, PublicKey

log = logging.getLogger(__name__)

# Events chained per sequencer transaction: the head lock is held for one batch at a time.
SEQUENCE_BATCH = 500

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


def append(chain: str, *, actor: str, verb: str, subject: str, data: dict | None = None) -> AuditEvent:
    """Accept one event in the current transaction (a plain insert, no lock); it is chained right after
    the transaction commits. Its seq and hash are None until then."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("audit.append must run inside the transaction of the change it records")
    data = data or {}
    refuse_secrets(data)
    # Microsecond precision survives every database round trip, so the hash can be recomputed.
    event = AuditEvent.objects.create(
        chain=chain, at=timezone.now(), actor=actor, verb=verb, subject=subject, data=data
    )
    # Once per event: the second call finds nothing to chain (one indexed query) and returns.
    transaction.on_commit(lambda: sequence_after_commit(chain))
    return event


# One sequencer per chain and process at a time: a writer whose commit finds this process already
# sequencing its chain leaves its event to that sequencer instead of queueing on the head's row lock.
_sequencers: dict[str, threading.Lock] = {}
_sequencers_guard = threading.Lock()
# Rounds one after-commit hook runs at most under continuous load before it leaves the chain to the next
# writer's hook (or the worker's tick): the caller's request should not carry everybody's sequencing.
AFTER_COMMIT_ROUNDS = 10


def sequence_after_commit(chain: str) -> None:
    """The on-commit hook. The change is committed already, so a failure here must not surface to the
    caller as if the change had failed: it is logged, and the worker's next tick chains the event."""
    with _sequencers_guard:
        running = _sequencers.setdefault(chain, threading.Lock())
    try:
        for _ in range(AFTER_COMMIT_ROUNDS):
            if not running.acquire(blocking=False):
                return  # this process's sequencer of the chain runs now; it looks again once done
            try:
                sequence_chain(chain)
            finally:
                running.release()
            # A writer that committed while we held the lock saw it taken and left its event to us.
            if not _unsequenced(chain).exists():
                return
    except Exception:
        log.exception("sequencing %s after commit failed; the worker's next tick will chain it", chain)


def _locked_head(chain: str) -> ChainHead:
    try:
        return ChainHead.objects.select_for_update().get(chain=chain)
    except ChainHead.DoesNotExist:
        pass
    try:
        with transaction.atomic():
            ChainHead.objects.create(chain=chain, seq=0, hash=GENESIS_HASH)
    except IntegrityError:
        pass  # another sequencer created it first; the lock below waits for it
    return ChainHead.objects.select_for_update().get(chain=chain)


def _unsequenced(chain: str):
    return AuditEvent.objects.filter(chain=chain, seq__isnull=True)


def _seal(events: list[AuditEvent]) -> None:
    """The one update audit events ever get: seq, prev_hash and hash, once, in one statement. It goes
    around the models (AppendOnlyQuerySet refuses updates); the PostgreSQL trigger allows exactly this.
    (Raw SQL rather than bulk_update: its CASE expressions cost more than the sequencing itself.)"""
    rows = ", ".join(["(%s, %s, %s, %s)"] * len(events))
    params = [value for e in events for value in (e.id, e.seq, e.prev_hash, e.hash)]
    table = connection.ops.quote_name(AuditEvent._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET seq = v.column2, prev_hash = v.column3, hash = v.column4 "  # noqa: S608
            f"FROM (VALUES {rows}) AS v WHERE {table}.id = v.column1",
            params,
        )


def sequence_chain(chain: str) -> int:
    """Chain every committed unsequenced event of `chain`, in id order; returns how many. Everything
    committed before the call is chained when it returns."""
    chained = 0
    while _unsequenced(chain).exists():  # unlocked and indexed: most calls end here
        with transaction.atomic():
            head = _locked_head(chain)
            # Read after the lock: whatever an earlier holder chained is no longer unsequenced.
            batch = list(_unsequenced(chain).order_by("id")[:SEQUENCE_BATCH])
            if not batch:
                return chained
            seq, prev_hash = head.seq, head.hash
            due = []
            for event in batch:
                seq += 1
                event.seq, event.prev_hash = seq, prev_hash
                event.hash = prev_hash = hash_body(event.hashed_fields())
                if seq % settings.AUDIT_CHECKPOINT_EVERY == 0:
                    due.append((seq, event.hash))
            _seal(batch)
            ChainHead.objects.filter(chain=chain).update(seq=seq, hash=prev_hash)
            for checkpoint_seq, checkpoint_hash in due:
                write_checkpoint(chain, checkpoint_seq, checkpoint_hash)
        chained += len(batch)
    return chained


def sequence_pending() -> int:
    """Chain the committed unsequenced events of every chain (the worker's tick, exports, verification)."""
    chains = _unsequenced_chains()
    return sum(sequence_chain(chain) for chain in chains)


def _unsequenced_chains() -> list[str]:
    return sorted(set(AuditEvent.objects.filter(seq__isnull=True).values_list("chain", flat=True)))


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

    at = format_time(timezone.now())
    kid, signature = sign_bytes(checkpoint_payload(chain, seq, head_hash, at))
    archive_public_key(kid)
    try:
        with transaction.atomic():
            checkpoint = Checkpoint.objects.create(
                chain=chain, seq=seq, hash=head_hash, at=parse_time(at), kid=kid, signature=signature
            )
    except IntegrityError:
        return Checkpoint.objects.get(chain=chain, seq=seq)  # another process signed this head first
    # Outside the database too, once the checkpoint is committed (never a line for a rolled-back head).
    transaction.on_commit(lambda: checkpoint_files.write(checkpoint))
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
