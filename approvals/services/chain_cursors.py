"""Where a worker step that follows a tenant's sealed audit chain has read up to (audit SiemCursor): the
webhook feed (webhooks.py) and the chat posts that follow their proposals (chat_posts.py). Reading the
chain after a cursor keeps the changes themselves (intake, votes, transitions) free of their queries."""

from audit.models import ChainHead, SiemCursor


def sealed_head(chain: str) -> int:
    """The chain's last sealed seq (0 when it has none): a reader never reads past it."""
    return ChainHead.objects.filter(chain=chain).values_list("seq", flat=True).first() or 0


def start_at_head(sink: str, chain: str) -> None:
    """A new reader of the chain starts at its head: what came before is not its business."""
    SiemCursor.objects.get_or_create(sink=sink, chain=chain, defaults={"seq": sealed_head(chain)})
