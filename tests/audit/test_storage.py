"""Each hand-written statement of audit/storage/__init__.py does what its plain-ORM twin does. The statements
are PostgreSQL's; on SQLite storage runs the twin itself, so the same tests hold there too. The export
lines' statement is compared with the Python writer in test_export_lines.py; making seals durable
(`synchronous_commit`) in test_worker_sequencing.py; restoring lost pending rows (the ORM's now) in
test_chain.py."""

from datetime import UTC, datetime

import pytest
from django.db import DEFAULT_DB_ALIAS, connection

from audit import storage
from audit.models import AuditEvent, AuditPending, AuditSeal, ChainHead, Verb
from audit.verify.hashing import GENESIS_HASH, hash_body
from lib.storage.pg_listen import PostgresListener

pytestmark = pytest.mark.django_db

AT = datetime(2026, 12, 1, 10, 15, 0, 123456, tzinfo=UTC)
DATA = {"text": 'a "quoted"\nline é', "nested": {"b": [1, 2, None], "a": True}, "person": "person:x"}


def unsaved(chain: str, count: int = 3) -> list[AuditEvent]:
    return [
        AuditEvent(
            chain=chain,
            at=AT,
            actor="system",
            verb=Verb.HALT_STARTED,
            subject=f"halt:{n}",
            data={**DATA, "n": n},
        )
        for n in range(count)
    ]


def insert_with_the_orm(events: list[AuditEvent]) -> list[AuditEvent]:
    AuditEvent.objects.bulk_create(events)
    AuditPending.objects.bulk_create([AuditPending(event=e, chain=e.chain) for e in events])
    return events


def stored(chain: str) -> list[tuple]:
    """The chain's events as stored, in id order, and whether each has its pending row."""
    pending = set(AuditPending.objects.filter(chain=chain).values_list("event_id", flat=True))
    events = AuditEvent._base_manager.filter(chain=chain).order_by("id")
    return [
        (e.at, e.actor, e.verb, e.subject, e.data, e.id in pending)
        for e in events.only("id", "at", "actor", "verb", "subject", "data")
    ]


def test_events_inserted_with_their_pending_rows_in_one_statement_equal_the_orm_twin():
    inserted = storage.insert_events(unsaved("tenant:storage"))
    twins = insert_with_the_orm(unsaved("tenant:orm"))

    assert stored("tenant:storage") == stored("tenant:orm")
    assert len(stored("tenant:storage")) == 3
    assert [e.id for e in inserted] == list(
        AuditEvent._base_manager.filter(chain="tenant:storage").order_by("id").values_list("id", flat=True)
    )
    assert [(e.subject, e.data, e.stored) for e in inserted] == [(e.subject, e.data, e.stored) for e in twins]


@pytest.mark.postgres
@pytest.mark.skipif(connection.vendor != "postgresql", reason="a data-modifying CTE is PostgreSQL's")
def test_events_accepted_inside_a_callers_statement_equal_the_orm_twin():
    events: list[dict] = [
        {
            "actor": "system",
            "verb": Verb.HALT_STARTED,
            "data": DATA,
            "data_sql": "jsonb_build_object('rev', c.rev)",
        },
        {"actor": "agent:a", "verb": Verb.HALT_LIFTED},
    ]
    sql, params = storage.events_in_statement_sql(
        "tenant:storage", events, source="c", subject_sql="'proposal:' || c.id", now=AT
    )
    with connection.cursor() as cursor:
        cursor.execute(f"WITH c AS (SELECT 'p1'::text AS id, 4 AS rev), {sql} SELECT 1", params)  # noqa: S608

    insert_with_the_orm(
        [
            AuditEvent(
                chain="tenant:orm",
                at=AT,
                actor="system",
                verb=Verb.HALT_STARTED,
                subject="proposal:p1",
                data={**DATA, "rev": 4},
            ),
            AuditEvent(
                chain="tenant:orm",
                at=AT,
                actor="agent:a",
                verb=Verb.HALT_LIFTED,
                subject="proposal:p1",
                data={},
            ),
        ]
    )
    assert stored("tenant:storage") == stored("tenant:orm")
    assert len(stored("tenant:storage")) == 2


def placed(chain: str) -> tuple[list[AuditEvent], str]:
    """Three accepted events of a new chain with their seq, prev_hash and hash set, and the last hash."""
    ChainHead.objects.create(chain=chain, seq=0, hash=GENESIS_HASH)
    events = insert_with_the_orm(unsaved(chain))
    prev_hash = GENESIS_HASH
    for seq, event in enumerate(events, start=1):
        event.seq, event.prev_hash = seq, prev_hash
        event.hash = prev_hash = hash_body(event.hashed_fields())
    return events, prev_hash


def seal_with_the_orm(chain: str, events: list[AuditEvent], head_seq: int, head_hash: str) -> None:
    AuditSeal.objects.bulk_create(
        [
            AuditSeal(event=e, chain=chain, seq=e.seq, prev_hash=e.prev_hash, hash=e.hash)  # type: ignore[misc]  # sealed: set
            for e in events
        ]
    )
    AuditPending.objects.filter(event__in=events).delete()
    ChainHead.objects.filter(chain=chain).update(seq=head_seq, hash=head_hash)


def sealed_state(chain: str) -> tuple:
    seals = list(
        AuditSeal.objects.filter(chain=chain)
        .order_by("seq")
        .values_list("event_id", "seq", "prev_hash", "hash")
    )
    head = ChainHead.objects.values_list("seq", "hash").get(chain=chain)
    return seals, head, AuditPending.objects.filter(chain=chain).exists()


@pytest.mark.parametrize("durable", [True, False])
def test_seals_written_in_one_round_trip_equal_the_orm_twin(durable):
    events, head_hash = placed("tenant:storage")
    storage.seal("tenant:storage", events, 3, head_hash, DEFAULT_DB_ALIAS, durable=durable)
    twins, twin_head_hash = placed("tenant:orm")
    seal_with_the_orm("tenant:orm", twins, 3, twin_head_hash)

    def expected(events, head_hash):
        return [(e.id, e.seq, e.prev_hash, e.hash) for e in events], (3, head_hash), False

    assert sealed_state("tenant:storage") == expected(events, head_hash)
    assert sealed_state("tenant:orm") == expected(twins, twin_head_hash)


@pytest.mark.postgres
@pytest.mark.skipif(connection.vendor != "postgresql", reason="NOTIFY is PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_waking_notifies_the_channel_a_listener_waits_on():
    listener = PostgresListener("reviewer_audit_storage_test")
    try:
        storage.wake("reviewer_audit_storage_test")
        assert listener.wait(5)
    finally:
        listener.close()
