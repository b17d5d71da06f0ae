"""The sequencer's pending rows, put back after something emptied their UNLOGGED table (audit/models.py
AuditPending): crash recovery, a promoted standby, a restored base backup."""

import logging

from django.db import transaction
from django.db.models import Exists, OuterRef

from audit.models import AuditEvent, AuditPending, AuditPendingMark, AuditSeal

log = logging.getLogger(__name__)

# Rows per INSERT when restoring (one recovery may find many events without a seal).
RESTORE_BATCH = 1000


def restore_lost_pending(db: str) -> int:
    """Put back the pending row of every event that has neither a seal nor a pending row, once after
    something emptied the UNLOGGED pending table (crash recovery, a promoted standby, a restored base
    backup: see AuditPendingMark), through connection `db` (the sequencer's); returns how many. Costs
    one indexed read while the mark is there. The scan reads every event without a seal: once per
    recovery, never per append. Every sequencer pass calls it first (audit/chain/sequencer.py). No
    bench row depends on it: the ORM's read and inserts that ignore conflicts."""
    if AuditPendingMark.objects.using(db).exists():
        return 0
    sealed = AuditSeal.objects.using(db).filter(event_id=OuterRef("pk"))
    pending = AuditPending.objects.using(db).filter(event_id=OuterRef("pk"))
    with transaction.atomic(using=db):
        # One snapshot on PostgreSQL: an event sealed meanwhile has its seal or still its pending row in
        # it. A writer's uncommitted event is not seen, and brings its own pending row. Two sequencers
        # restoring at once insert the same rows; the second's conflicts do nothing.
        lost = (
            AuditEvent._base_manager.using(db)
            .filter(~Exists(sealed), ~Exists(pending))
            .order_by("id")
            .values_list("id", "chain")
        )
        restored = len(
            AuditPending.objects.using(db).bulk_create(
                [AuditPending(event_id=id_, chain=chain) for id_, chain in lost],
                ignore_conflicts=True,
                batch_size=RESTORE_BATCH,
            )
        )
        AuditPendingMark.objects.using(db).bulk_create([AuditPendingMark(id=1)], ignore_conflicts=True)
    if restored:
        log.warning("audit: restored %d pending row(s) the database had lost (crash recovery?)", restored)
    return restored
