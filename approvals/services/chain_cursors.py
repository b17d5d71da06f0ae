"""Where a worker step that follows a tenant's sealed audit chain has read up to (audit SiemCursor): the
webhook feed (webhooks.py) and the chat posts that follow their proposals (chat_posts.py). Reading the
chain after a cursor keeps the changes themselves (intake, votes, transitions) free of their queries."""

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import transaction

from audit.models import AuditEvent, ChainHead, SiemCursor


def sealed_head(chain: str) -> int:
    """The chain's last sealed seq (0 when it has none): a reader never reads past it."""
    return ChainHead.objects.filter(chain=chain).values_list("seq", flat=True).first() or 0


def start_at_head(sink: str, chain: str) -> None:
    """A new reader of the chain starts at its head: what came before is not its business."""
    SiemCursor.objects.get_or_create(sink=sink, chain=chain, defaults={"seq": sealed_head(chain)})


@contextmanager
def events_after_cursor(
    sink: str, chain: str, batch: int, *, only: tuple[str, ...] = (), **filters
) -> Iterator[list[AuditEvent]]:
    """One transaction of a reader: the sealed events of `chain` after its cursor that match `filters`,
    oldest first, at most `batch` (`only`: the fields the reader uses, beside the id and seq; all when
    empty). When the block ends without an error the cursor moves past them, or to the head when fewer
    than `batch` matched (nothing before it is left for this reader); on an error nothing moves. The
    cursor's row is locked, so two workers never read the same events."""
    start_at_head(sink, chain)
    with transaction.atomic(durable=True):
        cursor = SiemCursor.objects.select_for_update().get(sink=sink, chain=chain)
        head = sealed_head(chain)
        events = AuditEvent.objects.chained(chain).filter(seq__gt=cursor.seq, seq__lte=head, **filters)
        if only:
            events = events.only(*only)
        events = list(events.order_by("seq")[:batch])
        yield events
        cursor.seq = events[-1].seq if len(events) == batch else head
        cursor.save(update_fields=["seq"])
