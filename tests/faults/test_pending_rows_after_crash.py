"""The sequencer's pending rows are UNLOGGED on PostgreSQL (audit/models.py AuditPending): a crash of
the database server empties them. Rehearsed on a private PostgreSQL (tests/faults/servers.py) killed
with an immediate shutdown, so that the next start runs crash recovery, which resets every UNLOGGED
table: what must hold is that no accepted event is lost from the chain, and that the events sealed
before the crash keep their places."""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from audit.chain.accept import append
from audit.chain.lost_pending import restore_lost_pending
from audit.chain.sequencer import sequence_chain, sequence_pending, sequencer_alias
from audit.chain.verification import verify_chain
from audit.models import AuditEvent, AuditPending, AuditPendingMark, AuditSeal

CHAIN = "tenant:crash"


def accept(subjects: list[str]) -> None:
    for subject in subjects:
        with transaction.atomic():
            append(CHAIN, actor="agent:w", verb="proposal.submitted", subject=subject)


@pytest.mark.database_independent  # on its private PostgreSQL
def test_events_pending_when_postgres_crashed_are_restored_and_chained_after_it(
    on_private_database, private_postgres, settings
):
    on_private_database()
    settings.AUDIT_SEQUENCING = "worker"  # the appending process leaves its events pending
    accept(["proposal:1", "proposal:2"])
    sequence_chain(CHAIN)
    accept(["proposal:3", "proposal:4", "proposal:5"])
    assert AuditPending.objects.filter(chain=CHAIN).count() == 3
    sealed_before = dict(AuditSeal.objects.filter(chain=CHAIN).values_list("event_id", "hash"))

    private_postgres.restart()  # SIGQUIT, then a start that runs crash recovery
    connection.close()  # the old connection died with the server

    assert AuditEvent._base_manager.filter(chain=CHAIN).count() == 5  # the events are logged: all there
    assert not AuditPending.objects.exists()  # crash recovery reset the UNLOGGED hints...
    assert not AuditPendingMark.objects.exists()  # ...and the mark with them

    assert sequence_pending() == 3  # the worker's pass: restores the three, then chains them
    assert not AuditPending.objects.exists()
    seals = dict(AuditSeal.objects.filter(chain=CHAIN).values_list("event_id", "hash"))
    assert {event_id: seals[event_id] for event_id in sealed_before} == sealed_before
    subjects = list(AuditEvent.objects.filter(chain=CHAIN).order_by("seq").values_list("subject", flat=True))
    assert subjects == [f"proposal:{n}" for n in range(1, 6)]
    assert verify_chain(CHAIN).ok

    with CaptureQueriesContext(connection) as queries:
        assert restore_lost_pending(sequencer_alias()) == 0  # the mark is back: one indexed read, no scan
    assert len(queries) == 1
