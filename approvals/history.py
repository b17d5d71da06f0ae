"""The history of one target: earlier proposals of the same tool on the same thing (the same order, the
same recipient, the same resource), so a reviewer sees a likely duplicate before approving it and a
policy can count earlier outcomes (CEL `history.count_succeeded_24h`). Read only.

A proposal's target is `Proposal.target_key`, fixed at intake from the action: the tool and the
action's `target` when the agent names one, else the first key argument found (`KEY_ARGUMENTS`). An
action with neither has no target and so no history.
"""

from datetime import timedelta

from django.db.models import IntegerField, Subquery
from django.utils import timezone

from approvals.models import Proposal
from approvals.states import RELEASED, STARTED, WAITING_FOR_PEOPLE, State

# Arguments that name what an action acts on, in the order they are tried.
KEY_ARGUMENTS = (
    "order_id",
    "invoice_id",
    "account_id",
    "customer_id",
    "recipient",
    "to",
    "resource",
    "resource_id",
    "path",
    "url",
    "id",
)
TARGET_KEY_MAX = 255
PAGE_WINDOW = timedelta(days=7)
POLICY_WINDOW = timedelta(hours=24)
HISTORY_LIMIT = 10

# Earlier outcomes that make a new proposal on the same target a likely duplicate: it was done, is being
# done, may be done (released), or is waiting for people right now.
DUPLICATE_STATES = (RELEASED | STARTED | WAITING_FOR_PEOPLE) - {State.FAILED}
DONE_STATES = frozenset({State.SUCCEEDED, State.EXECUTING, State.UNKNOWN})


def target_key(action: dict) -> str:
    """The target of an action: "payments.refund|order:1182" or "payments.refund|order_id=1182";
    "" when the action names none."""
    tool = str(action.get("tool") or "")
    target = action.get("target")
    if target not in (None, ""):
        return f"{tool}|{target}"[:TARGET_KEY_MAX]
    arguments = action.get("arguments") or {}
    for name in KEY_ARGUMENTS:
        value = arguments.get(name)
        if value not in (None, "") and not isinstance(value, dict | list):
            return f"{tool}|{name}={value}"[:TARGET_KEY_MAX]
    return ""


def earlier_on_target(proposal: Proposal, window: timedelta = PAGE_WINDOW):
    """Other proposals on the same target in the window, newest first. The proposal's own task (its
    supersession chain: edits, answers) is one request, not history."""
    if not proposal.target_key:
        return Proposal.objects.none()
    return (
        Proposal.objects.filter(
            tenant_id=proposal.tenant_id,
            target_key=proposal.target_key,
            created_at__gte=timezone.now() - window,
        )
        .exclude(pk=proposal.pk)
        .exclude(agent_id=proposal.agent_id, task_id=proposal.task_id)
        .order_by("-created_at", "-pk")
    )


# What CEL sees as `history`: each count's states (None: every state), over the last 24 hours.
POLICY_COUNTS = {
    "count_24h": None,
    "count_succeeded_24h": frozenset({State.SUCCEEDED}),
    "count_released_24h": RELEASED | STARTED,
    "count_rejected_24h": frozenset({State.REJECTED, State.DENIED}),
    "count_open": WAITING_FOR_PEOPLE,
}


def policy_counts(proposal: Proposal | None) -> dict:
    """What CEL sees as `history`: counts over the last 24 hours on the same target (all zero without a
    stored proposal, e.g. a policy tested against a sample)."""
    states = (
        list(earlier_on_target(proposal, POLICY_WINDOW).values_list("state", flat=True)) if proposal else []
    )
    return {
        name: sum(1 for state in states if among is None or state in among)
        for name, among in POLICY_COUNTS.items()
    }


class _Count(Subquery):
    """The number of rows of a query, as a scalar subquery (0 when none)."""

    template = "(SELECT COUNT(*) FROM (%(subquery)s) _rows)"
    output_field = IntegerField()


def policy_count_expressions(proposal: Proposal) -> dict:
    """policy_counts() as scalar subqueries, for a caller that reads them in a query it makes anyway
    (intake: before the proposal is stored, so `proposal` need not be saved). Empty without a target:
    its counts are all zero, no query needed."""
    if not proposal.target_key:
        return {}
    earlier = earlier_on_target(proposal, POLICY_WINDOW).order_by()
    return {
        name: _Count((earlier if among is None else earlier.filter(state__in=sorted(among))).values("pk"))
        for name, among in POLICY_COUNTS.items()
    }
