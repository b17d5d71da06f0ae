"""The sequencer's pending rows, put back after something emptied their UNLOGGED table (audit/models.py
AuditPending): crash recovery, a promoted standby, a restored base backup."""

import logging

from django.db import connection, connections, transaction

from audit.models import AuditEvent, AuditPending, AuditPendingMark, AuditSeal

log = logging.getLogger(__name__)


def restore_lost_pending(db: str) -> int:
    """Put back the pending row of every event that has neither a seal nor a pending row, once after
    something emptied the UNLOGGED pending table (crash recovery, a promoted standby, a restored base
    backup: see AuditPendingMark), through connection `db` (the sequencer's); returns how many. Costs
    one indexed read while the mark is there. The scan reads every event without a seal: once per
    recovery, never per append. Every sequencer pass calls it first (audit/chain/sequencer.py)."""
    if AuditPendingMark.objects.using(db).exists():
        return 0
    event_table, seal_table, pending_table, mark_table = (
        connection.ops.quote_name(m._meta.db_table)
        for m in (AuditEvent, AuditSeal, AuditPending, AuditPendingMark)
    )
    with transaction.atomic(using=db), connections[db].cursor() as cursor:
        # One snapshot: an event sealed meanwhile has its seal or still its pending row in it. A writer's
        # uncommitted event is not seen, and brings its own pending row. Two sequencers restoring at
        # once insert the same rows; the second's conflict does nothing.
        cursor.execute(
            f"INSERT INTO {pending_table} (event_id, chain) SELECT e.id, e.chain FROM {event_table} e"  # noqa: S608
            f" WHERE NOT EXISTS (SELECT 1 FROM {seal_table} s WHERE s.event_id = e.id)"
            f" AND NOT EXISTS (SELECT 1 FROM {pending_table} p WHERE p.event_id = e.id)"
            " ON CONFLICT DO NOTHING"
        )
        restored = max(cursor.rowcount, 0)
        cursor.execute(f"INSERT INTO {mark_table} (id) VALUES (1) ON CONFLICT DO NOTHING")  # noqa: S608
    if restored:
        log.warning("audit: restored %d pending row(s) the database had lost (crash recovery?)", restored)
    return restored
