"""What tells the two proposal lists apart. templates/approvals/proposal_list.html draws both pages (and
their live partial) from one of these; views.py and consumers.py pick it by name."""

from dataclasses import dataclass


@dataclass(frozen=True)
class ListPage:
    name: str  # the URL name, the socket's ?view=, and the prefix of the list's element ids
    title: str
    lede: str
    count_suffix: str  # after "N proposal(s)"
    caption: str
    show_state: bool  # a State column and a State filter
    empty: str  # when nothing matches ("with these filters" is added when filters are set)
    empty_after: str = ""
    for_voters: bool = False  # people who do not vote are told where to look instead


QUEUE = ListPage(
    name="queue",
    title="To decide",
    lede="Proposals that need your decision, the most urgent first. "
    "Nothing here runs until the people it needs have approved it.",
    count_suffix=" waiting for you",
    caption="Proposals waiting for your decision",
    show_state=False,
    empty="Nothing needs your decision",
    empty_after=" New proposals appear here without reloading.",
    for_voters=True,
)
WATCHING = ListPage(
    name="watching",
    title="Watching",
    lede="Everything else in your tenants, newest first: proposals that others decide, "
    "that you already voted on, or that are closed. Read-only.",
    count_suffix="",
    caption="Other proposals in your tenants",
    show_state=True,
    empty="Nothing to show",
)
LIST_PAGES = {page.name: page for page in (QUEUE, WATCHING)}
