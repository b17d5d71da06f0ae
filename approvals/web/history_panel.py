"""The proposal page's "Earlier on the same target" panel: the proposals before it on its target
(approvals/policy/history.py), and whether it is a likely duplicate of one of them. Read only."""

from django.db.models import Prefetch

from approvals.models import Proposal, Vote
from approvals.policy import history
from approvals.policy.headline import action_headline


def history_context(proposal: Proposal) -> dict:
    """Earlier proposals on the same target (approvals/policy/history.py) as the page lists them, with
    this request's own earlier versions marked as such, and whether this one is a likely duplicate of
    another request that was done, may be done, or waits for people now."""
    earlier = list(
        history.page_history(proposal)
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
        earlier_version = other.agent_id == proposal.agent_id and other.task_id == proposal.task_id
        items.append(
            {
                "proposal": other,
                "earlier_version": earlier_version,
                "headline": headline,
                "agent_words": (other.summary or "")[:200],
                "amount": headline.amount,
                "approvers": approvers,
                "duplicate": not earlier_version and other.state in history.DUPLICATE_STATES,
            }
        )
    duplicates = [item for item in items if item["duplicate"]]
    return {
        "target": proposal.target_key.split("|", 1)[-1] if proposal.target_key else "",
        "items": items,
        "likely_duplicate": duplicates[0] if duplicates else None,
        "window_days": history.PAGE_WINDOW.days,
    }
