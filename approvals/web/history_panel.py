"""The proposal page's "Earlier on the same target" panel: the proposals before it on its target
(approvals/policy/history.py), and whether it is a likely duplicate of one of them. Read only."""

from django.db.models import Prefetch

from approvals.models import Proposal, Vote
from approvals.policy import history
from approvals.policy.headline import action_headline


def history_context(proposal: Proposal) -> dict:
    """Earlier proposals on the same target (approvals/policy/history.py) as the page lists them, and whether
    this one is a likely duplicate of one that was done, may be done, or waits for people now."""
    earlier = list(
        history.earlier_on_target(proposal)
        .select_related("agent")
        .prefetch_related(
            Prefetch("votes", queryset=Vote.objects.select_related("voter").order_by("created_at"))
        )[: history.HISTORY_LIMIT]
    )
    items = []
    for other in earlier:
        headline = action_headline(other.action, other.consequences)
        approvers = [
            vote.voter.get_full_name() or vote.voter.get_username()
            for vote in other.votes.all()
            if vote.verdict == Vote.Verdict.APPROVE
        ]
        items.append(
            {
                "proposal": other,
                "headline": headline,
                "agent_words": (other.summary or "")[:200],
                "amount": headline.amount,
                "approvers": approvers,
                "duplicate": other.state in history.DUPLICATE_STATES,
            }
        )
    duplicates = [item for item in items if item["duplicate"]]
    return {
        "target": proposal.target_key.split("|", 1)[-1] if proposal.target_key else "",
        "items": items,
        "likely_duplicate": duplicates[0] if duplicates else None,
        "window_days": history.PAGE_WINDOW.days,
    }
