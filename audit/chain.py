"""Accept, then sequence (as Certificate Transparency logs do).

`append()` runs inside the transaction of the change it records and only inserts the event and its
pending row (one statement on PostgreSQL): no lock, so a tenant's writes never queue behind one another.
`sequence_chain()` chains what has committed: in one short transaction it locks the chain head, takes
the chain's pending events in id order, inserts each one's seal (seq, prev_hash, hash) in one multi-row
INSERT, drops their pending rows, moves the head and signs a checkpoint every AUDIT_CHECKPOINT_EVERY
events. No row is ever updated but the head: an event and its seal are each written once. Where it
runs is AUDIT_SEQUENCING: "worker" (the appending process wakes the workers after commit and their
sequencer thread chains in batches, audit/sequencer_worker.py) or "after_commit" (the appending process
chains right after its commit, on its after-commit thread, lib/commit_hooks.py); in both, every worker
tick chains what is pending (`sequence_pending()`), e.g. an event whose process died after its commit.

A batch with no checkpoint due commits with synchronous_commit off (AUDIT_SEQUENCER_ASYNC_COMMIT): a
crash can lose only seals, whose events stay pending and are sealed again. So nothing derived from a
seal leaves the database before `make_seals_durable()` (exports, bundles, evidence, the SIEM stream);
a checkpoint's batch commits synchronously, flushing every seal before it.

The sequencer works through its own connection, `sequencer_alias()`: the `sequencer` database alias when
settings configure one (AUDIT_SEQUENCER_DATABASE_URL, the sequencer's role, which alone may insert seals
and move chain heads: manage.py setup_database_roles --sequencer), else the default connection.
A seal it did not write (one inserted past the head by someone else) is adopted, logged as an error, and
left for audit_verify to name: it never stops the chain's later events from being chained.
"""

import logging
import threading
from datetime import datetime, timedelta
from typing import Any, cast

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, connections, transaction
from django.db.models import Exists, Field, Max, OuterRef
from django.utils import timezone

from audit import checkpoint_files
from audit.event_data import refuse_unfit_event
from audit.lost_pending import restore_lost_pending
from audit.models import AuditEvent, AuditPending, AuditSeal, ChainHead, Checkpoint, PublicKey
from audit.sequencer_wakeup import wake_sequencers
from audit.shapes import format_time, parse_time
from audit.verify.hashing import GENESIS_HASH, checkpoint_payload, hash_body
from lib.commit_hooks import on_commit_in_background
from lib.held_writes import write

log = logging.getLogger(__name__)

SEQUENCER_ALIAS = "sequencer"


def sequencer_alias() -> str:
    """The connection the sequencer seals through: its own role's when settings configure one."""
    return SEQUENCER_ALIAS if SEQUENCER_ALIAS in settings.DATABASES else DEFAULT_DB_ALIAS


# Events chained per sequencer transaction: the head lock is held for one batch at a time.
SEQUENCE_BATCH = 500


def append(chain: str, *, actor: str, verb: str, subject: str, data: dict | None = None) -> AuditEvent:
    """Accept one event in the current transaction (an insert, no lock); it is chained once the
    transaction commits (by the worker, or right after the commit: AUDIT_SEQUENCING). Its seq and hash
    are None until then."""
    return append_many(chain, [{"actor": actor, "verb": verb, "subject": subject, "data": data}])[0]


def append_many(chain: str, events: list[dict]) -> list[AuditEvent]:
    """Accept several events of one chain in the current transaction, in this order, with one statement
    on PostgreSQL (one round trip, however many): each dict has actor, verb, subject and optionally data.
    They are chained, in this order and next to each other unless another writer's events commit in
    between, once the transaction commits."""
    accepted = _accepted(chain, events)
    if not accepted:
        return []
    if connection.vendor == "postgresql":
        sql, params = _insert_with_pending_sql(accepted)
        with connection.cursor() as cursor:
            cursor.execute(sql + " RETURNING event_id", params)
            ids = sorted(row[0] for row in cursor.fetchall())
        accepted = _as_stored(accepted, ids)
    else:
        AuditEvent.objects.bulk_create(accepted)
        AuditPending.objects.bulk_create([AuditPending(event=e, chain=chain) for e in accepted])
    chain_when_committed(chain)
    return accepted


def accept_many(chain: str, events: list[dict]) -> None:
    """append_many for a caller that reads nothing back: on PostgreSQL its statement goes with the
    caller's held writes, if it holds them (lib/held_writes.py), in the same round trip."""
    if connection.vendor != "postgresql":
        append_many(chain, events)  # the pending rows need the events' ids: two statements
        return
    accepted = _accepted(chain, events)
    if accepted:
        write(*_insert_with_pending_sql(accepted))
        chain_when_committed(chain)


def _accepted(chain: str, events: list[dict]) -> list[AuditEvent]:
    """The events as unsaved rows, each checked (a verb the trail knows, no secret in its data)."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("audit.append must run inside the transaction of the change it records")
    now = timezone.now()  # microsecond precision survives every round trip: the hash can be recomputed
    accepted = []
    for event in events:
        data = event.get("data") or {}
        refuse_unfit_event(event["verb"], data)
        accepted.append(
            AuditEvent(
                chain=chain,
                at=now,
                actor=event["actor"],
                verb=event["verb"],
                subject=event["subject"],
                data=data,
            )
        )
    return accepted


def chain_when_committed(chain: str) -> None:
    # One hook per transaction (and chain), on the process's after-commit thread (the request answers
    # without waiting for it), where one queued run covers every commit before it: a NOTIFY that wakes
    # the workers' sequencers, or this process chaining the events itself.
    if settings.AUDIT_SEQUENCING == "worker":
        on_commit_in_background(wake_sequencers, key="audit.wake")
    else:
        on_commit_in_background(lambda: sequence_after_commit(chain), key=("audit.sequence", chain))


EVENT_COLUMNS = ("chain", "at", "actor", "verb", "subject", "data")


def _insert_with_pending_sql(events: list[AuditEvent]) -> tuple[str, list]:
    """The events and their pending rows in one statement (PostgreSQL): a data-modifying CTE."""
    # Columns, no relations: get_field gives Fields here.
    fields = [cast(Field, AuditEvent._meta.get_field(name)) for name in EVENT_COLUMNS]
    rows = ", ".join(["(" + ", ".join(["%s"] * len(fields)) + ")"] * len(events))
    params = [
        field.get_db_prep_save(getattr(event, field.attname), connection)
        for event in events
        for field in fields
    ]
    event_table = connection.ops.quote_name(AuditEvent._meta.db_table)
    pending_table = connection.ops.quote_name(AuditPending._meta.db_table)
    sql = (
        f"WITH accepted AS (INSERT INTO {event_table} ({', '.join(EVENT_COLUMNS)}) "  # noqa: S608
        f"VALUES {rows} RETURNING id, chain) "
        f"INSERT INTO {pending_table} (event_id, chain) SELECT id, chain FROM accepted ORDER BY id"
    )
    return sql, params


def _as_stored(events: list[AuditEvent], ids: list[int]) -> list[AuditEvent]:
    """The events as stored rows (with their ids), as a query would have read them."""
    columns = [field.attname for field in AuditEvent._meta.concrete_fields]
    stored = []
    for event, id_ in zip(events, ids, strict=True):  # ids come from one sequence, in VALUES order
        event.id = id_
        stored.append(AuditEvent.from_db(connection.alias, columns, [getattr(event, c) for c in columns]))
    return stored


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
                # Straight to the head lock, no look first: this writer has just committed an event.
                _sequence_batch(chain)
            finally:
                running.release()
            # A writer that committed while we held the lock saw it taken and left its event to us.
            if not _unsequenced(chain).exists():
                return
    except Exception:
        log.exception("sequencing %s after commit failed; the worker's next tick will chain it", chain)


def _locked_head(chain: str, db: str) -> ChainHead:
    """The chain's head, locked, with `overrun`: whether a seal already exists past it (in the same
    statement, so the usual path costs no round trip more)."""
    beyond = AuditSeal.objects.using(db).filter(chain=OuterRef("chain"), seq=OuterRef("seq") + 1)
    heads = ChainHead.objects.using(db).annotate(overrun=Exists(beyond))
    try:
        return heads.select_for_update().get(chain=chain)
    except ChainHead.DoesNotExist:
        pass
    try:
        with transaction.atomic(using=db):
            ChainHead.objects.using(db).create(chain=chain, seq=0, hash=GENESIS_HASH)
    except IntegrityError:
        pass  # another sequencer created it first; the lock below waits for it
    return heads.select_for_update().get(chain=chain)


def _unsequenced(chain: str, db: str | None = None):
    return AuditPending.objects.using(db or sequencer_alias()).filter(chain=chain)


def _pending_batch(chain: str, db: str) -> list[AuditEvent]:
    """The chain's next pending events in id order, with what their hashes cover."""
    ids = _unsequenced(chain, db).order_by("event_id").values_list("event_id", flat=True)[:SEQUENCE_BATCH]
    # The base manager: no seal join (these have none yet); one statement, the ids as a subquery.
    return list(AuditEvent._base_manager.using(db).filter(id__in=ids).order_by("id"))


def _adopt_foreign_seals(chain: str, head: ChainHead, db: str) -> None:
    """Seals past the head were not written by a sequencer (which moves the head in the same transaction):
    someone inserted them. Refusing to go on would leave every later event unchained, so the head moves
    onto them (the database's trigger already made them continue the chain) and audit_verify names the
    first whose hash does not match its event. Their events' pending rows go: they are sealed."""
    foreign = list(
        AuditSeal.objects.using(db)
        .filter(chain=chain, seq__gt=head.seq)
        .order_by("seq")
        .values_list("seq", "hash", "event_id")
    )
    adopted: list[tuple[int, str, int]] = []  # (seq, hash, event id)
    for seq, hash_, event_id in foreign:
        if seq != head.seq + len(adopted) + 1:
            break
        adopted.append((seq, hash_, event_id))
    if not adopted:
        return
    log.error(
        "audit chain %s: %d seal(s) from seq %d were not written by the sequencer; chaining continues "
        "after them, and audit_verify names any that does not match its event",
        chain,
        len(adopted),
        adopted[0][0],
    )
    head.seq, head.hash = adopted[-1][0], adopted[-1][1]
    ChainHead.objects.using(db).filter(chain=chain).update(seq=head.seq, hash=head.hash)
    AuditPending.objects.using(db).filter(event_id__in=[event_id for _, _, event_id in adopted]).delete()


def _seal(
    chain: str, events: list[AuditEvent], head_seq: int, head_hash: str, db: str, *, durable: bool
) -> None:
    """The seals of `events` (one multi-row INSERT, which the PostgreSQL trigger checks continues the
    chain), their pending rows dropped and the head moved: the events themselves are not written again.
    Not `durable`: the commit does not wait for its fsync (PostgreSQL)."""
    seal_table = connection.ops.quote_name(AuditSeal._meta.db_table)
    pending_table = connection.ops.quote_name(AuditPending._meta.db_table)
    rows = ", ".join(["(%s, %s, %s, %s, %s)"] * len(events))
    params = [value for e in events for value in (e.id, chain, e.seq, e.prev_hash, e.hash)]
    ids = [e.id for e in events]
    marks = ", ".join(["%s"] * len(ids))
    sequencer = connections[db]
    head_table = connection.ops.quote_name(ChainHead._meta.db_table)
    # Table names from the models, values as parameters.
    insert = f"INSERT INTO {seal_table} (event_id, chain, seq, prev_hash, hash) VALUES {rows}"  # noqa: S608
    delete = f"DELETE FROM {pending_table} WHERE event_id IN ({marks})"  # noqa: S608
    move = f"UPDATE {head_table} SET seq = %s, hash = %s WHERE chain = %s"  # noqa: S608
    statements: list[tuple[str, list[Any]]] = [
        (insert, params),
        (delete, ids),
        (move, [head_seq, head_hash, chain]),
    ]
    if not durable and sequencer.vendor == "postgresql":
        statements.insert(0, ("SET LOCAL synchronous_commit = off", []))
    with sequencer.cursor() as cursor:
        if sequencer.vendor == "postgresql":
            # One round trip: psycopg binds client-side here (Django's default), so several statements
            # go in one execute, still in order and in this transaction.
            cursor.execute(";\n".join(sql for sql, _ in statements), [p for _, ps in statements for p in ps])
        else:
            for sql, statement_params in statements:
                cursor.execute(sql, statement_params)


def sequence_chain(chain: str) -> int:
    """Chain every committed pending event of `chain`, in id order; returns how many. Everything
    committed before the call is chained when it returns."""
    restore_lost_pending(sequencer_alias())
    return _chain_committed(chain)


def _chain_committed(chain: str) -> int:
    chained = 0
    while _unsequenced(chain).exists():  # unlocked, on the small pending table: most calls end here
        sealed = _sequence_batch(chain)
        if not sealed:
            return chained
        chained += sealed
    return chained


def _sequence_batch(chain: str) -> int:
    """One sequencer transaction: lock the head, seal up to SEQUENCE_BATCH pending events (four round
    trips with the commit, however many); returns how many."""
    db = sequencer_alias()
    with transaction.atomic(using=db):
        head = _locked_head(chain, db)
        if head.overrun:  # type: ignore[attr-defined]  # _locked_head's annotate(); its return type is the model
            _adopt_foreign_seals(chain, head, db)
        # Read after the lock: whatever an earlier holder chained is no longer pending.
        batch = _pending_batch(chain, db)
        if not batch:
            return 0
        seq, prev_hash = head.seq, head.hash
        due = []
        for event in batch:
            seq += 1
            event.seq, event.prev_hash = seq, prev_hash
            event.hash = prev_hash = hash_body(event.hashed_fields())
            if seq % settings.AUDIT_CHECKPOINT_EVERY == 0:
                due.append((seq, prev_hash))
        # A checkpoint leaves the database (its file): its batch, and so every seal before it, is flushed.
        durable = bool(due) or not settings.AUDIT_SEQUENCER_ASYNC_COMMIT
        _seal(chain, batch, seq, prev_hash, db, durable=durable)
        for checkpoint_seq, checkpoint_hash in due:
            write_checkpoint(chain, checkpoint_seq, checkpoint_hash, using=db)
    return len(batch)


def sequence_pending() -> int:
    """Chain the committed unsequenced events of every chain (the worker's tick, exports, verification)."""
    restore_lost_pending(sequencer_alias())
    chains = _unsequenced_chains()
    return sum(_chain_committed(chain) for chain in chains)


def _unsequenced_chains() -> list[str]:
    pending = AuditPending.objects.using(sequencer_alias())
    return sorted(set(pending.values_list("chain", flat=True).distinct()))


def make_seals_durable(chain: str) -> None:
    """Flush to disk every seal of `chain` this process can see (PostgreSQL; elsewhere every commit is
    durable). Call it after reading what is about to leave the database and before it leaves: a seal
    committed without its fsync could still be lost in a crash and sealed again differently (another
    event may have committed before it meanwhile). One synchronous commit of a transaction that wrote
    WAL flushes all WAL before it: here the head's row lock, taken and released."""
    db = sequencer_alias()
    if connections[db].vendor != "postgresql":
        return
    with transaction.atomic(using=db):
        with connections[db].cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit = on")
            head_table = connection.ops.quote_name(ChainHead._meta.db_table)
            cursor.execute(f"SELECT 1 FROM {head_table} WHERE chain = %s FOR UPDATE", [chain])  # noqa: S608


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
