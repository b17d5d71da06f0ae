"""Accepting events: `append()` runs inside the transaction of the change it records and only inserts the
event and its pending row (one statement on PostgreSQL): no lock, so a tenant's writes never queue
behind one another. The events are chained once that transaction commits (audit/chain/sequencer.py).
`accept_sql()` does the same inside a caller's own data-modifying statement (PostgreSQL), so that a
change and its events are one round trip (the consume: approvals/services/decisions.py)."""

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from audit import storage
from audit.chain.event_data import refuse_unfit_event
from audit.chain.sequencer import sequence_after_commit
from audit.chain.wakeup import wake_sequencers
from audit.models import AuditEvent
from lib.commit_hooks import on_commit_in_background
from lib.storage.held_writes import write


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
    accepted = storage.insert_events(accepted)
    chain_when_committed(chain)
    return accepted


def accept_many(chain: str, events: list[dict]) -> None:
    """append_many for a caller that reads nothing back: on PostgreSQL its statement goes with the
    caller's held writes, if it holds them (lib/storage/held_writes.py), in the same round trip."""
    if connection.vendor != "postgresql":
        append_many(chain, events)  # the pending rows need the events' ids: two statements
        return
    accepted = _accepted(chain, events)
    if accepted:
        write(*storage.insert_events_sql(accepted))
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


def accept_sql(chain: str, events: list[dict], *, source: str, subject_sql: str) -> tuple[str, list]:
    """append_many within a caller's data-modifying statement (PostgreSQL): CTEs to follow the caller's
    that accept the events and their pending rows once per row of its CTE `source` (none if it has
    none), and their parameters. `subject_sql` (the events' one subject) and an event's optional
    `data_sql` (merged into its data) are SQL over `source`'s columns, without placeholders."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("audit.accept_sql must run inside the transaction of the change it records")
    for event in events:
        refuse_unfit_event(event["verb"], event.get("data") or {})
    chain_when_committed(chain)
    return storage.events_in_statement_sql(
        chain, events, source=source, subject_sql=subject_sql, now=timezone.now()
    )
