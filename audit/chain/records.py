"""Reading the audit log back as plain dicts, page by page (keyset pagination on (chain, seq)), so any
number of events is read in constant memory on SQLite and PostgreSQL alike."""

from collections.abc import Iterator

from django.db.models import Count, Min, QuerySet

from audit.models import AuditEvent, AuditPending, Checkpoint
from audit.shapes import format_time

PAGE_SIZE = 2000
EVENT_FIELDS = ("chain", "seq", "at", "actor", "verb", "subject", "data", "prev_hash", "hash")


def event_dict(event: AuditEvent | dict) -> dict:
    """The exported form of an event: what the hash covers, plus the hash."""
    if isinstance(event, AuditEvent):
        event = {name: getattr(event, name) for name in EVENT_FIELDS}
    return {**event, "at": format_time(event["at"]) if not isinstance(event["at"], str) else event["at"]}


def checkpoint_dict(checkpoint: Checkpoint) -> dict:
    return {
        "chain": checkpoint.chain,
        "seq": checkpoint.seq,
        "hash": checkpoint.hash,
        "at": format_time(checkpoint.at),
        "kid": checkpoint.kid,
        "signature": checkpoint.signature,
    }


def event_pages(events: QuerySet, *, after_seq: int = 0, page_size: int | None = None) -> Iterator[list]:
    """Pages of event dicts in seq order from one chain's queryset (which must filter on a single chain)."""
    page_size = page_size or PAGE_SIZE
    while True:
        page = [
            event_dict(row)
            for row in events.filter(seq__gt=after_seq).order_by("seq").values(*EVENT_FIELDS)[:page_size]
        ]
        if not page:
            return
        yield page
        after_seq = page[-1]["seq"]
        if len(page) < page_size:
            return


def iter_events(events: QuerySet, *, after_seq: int = 0, page_size: int | None = None) -> Iterator[dict]:
    for page in event_pages(events, after_seq=after_seq, page_size=page_size):
        yield from page


def pending_by_chain(chain: str | None = None) -> dict[str, dict]:
    """Events accepted and not chained yet, by chain (only `chain` if given): {"count", "oldest"}, the
    oldest being the earliest event's time. One query."""
    waiting = AuditPending.objects.all() if chain is None else AuditPending.objects.filter(chain=chain)
    rows = waiting.values("chain").annotate(count=Count("pk"), oldest=Min("event__at"))
    return {row["chain"]: row for row in rows}
