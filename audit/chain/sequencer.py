"""Sequencing: events are accepted first (audit/chain/accept.py), then chained, as Certificate
Transparency logs do.

`sequence_chain()` chains what has committed: in one short transaction it locks the chain head, takes
the chain's pending events in id order, inserts each one's seal (seq, prev_hash, hash) in one multi-row
INSERT, drops their pending rows, moves the head and signs a checkpoint every AUDIT_CHECKPOINT_EVERY
events. No row is ever updated but the head: an event and its seal are each written once. Where it
runs is AUDIT_SEQUENCING: "worker" (the appending process wakes the workers after commit and their
sequencer thread chains in batches, audit/chain/sequencer_thread.py) or "after_commit" (the appending process
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

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections, transaction
from django.db.models import Exists, OuterRef

from audit import storage
from audit.chain.checkpoints import write_checkpoint
from audit.chain.lost_pending import restore_lost_pending
from audit.models import AuditEvent, AuditPending, AuditSeal, ChainHead
from audit.verify.hashing import GENESIS_HASH, hash_body

log = logging.getLogger(__name__)

SEQUENCER_ALIAS = "sequencer"


def sequencer_alias() -> str:
    """The connection the sequencer seals through: its own role's when settings configure one."""
    return SEQUENCER_ALIAS if SEQUENCER_ALIAS in settings.DATABASES else DEFAULT_DB_ALIAS


# Events chained per sequencer transaction: the head lock is held for one batch at a time.
SEQUENCE_BATCH = 500

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
        # The seals (which the PostgreSQL trigger checks continue the chain), their pending rows dropped
        # and the head moved: the events themselves are not written again.
        storage.seal(chain, batch, seq, prev_hash, db, durable=durable)
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
        storage.synchronous_commit(db)
        list(ChainHead.objects.using(db).select_for_update().filter(chain=chain).values_list("chain"))
