"""The history of one target: earlier proposals of the same tool on the same thing (the same order, the
same recipient, the same resource), so a reviewer sees a likely duplicate before approving it and a
policy can count earlier outcomes (CEL `history.count_succeeded_24h`). Read only.

A proposal's target is `Proposal.target_key`, fixed at intake from the action: the tool and the
action's `target` when the agent names one, else the first key argument found (`KEY_ARGUMENTS`). An
action with neither has no target and so no history.
"""

from datetime import timedelta
from functools import lru_cache

from django.db import connection
from django.db.models import CharField
from django.db.models.expressions import RawSQL
from django.utils import timezone

from approvals.models import Proposal
from approvals.sql import quoted_names
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


def policy_counts_expression(proposal: Proposal) -> RawSQL | None:
    """policy_counts() as one scalar subquery, for a caller that reads it in a query it makes anyway
    (intake, before the proposal is stored): one scan of the target's rows, every count at once, as
    "n,n,n,n,n" in POLICY_COUNTS order (read it with read_policy_counts; NULL when there is no row).
    Plain SQL built once per process: the ORM would rebuild this expression tree on every intake, at a
    cost several times the query's. The same rows as earlier_on_target (test_history.py checks both
    agree); a proposal not stored yet cannot be among them, so its own id needs no exclusion. None
    without a target: its counts are all zero, no query needed."""
    if not proposal.target_key:
        return None
    since = connection.ops.adapt_datetimefield_value(timezone.now() - POLICY_WINDOW)
    states = [state for among in POLICY_COUNTS.values() if among is not None for state in sorted(among)]
    params = (*states, proposal.tenant_id, proposal.target_key, since, proposal.agent_id, proposal.task_id)
    # Only names from the models and placeholders go into the SQL; every value is a parameter.
    return RawSQL(_policy_counts_sql(connection.vendor), params, output_field=CharField())  # noqa: S611


@lru_cache
def _policy_counts_sql(vendor: str) -> str:
    table, column = quoted_names(Proposal)

    def count(among) -> str:
        if among is None:
            return "COUNT(*)"
        placeholders = ", ".join(["%s"] * len(among))  # the states, in sorted order: see the params
        return f"SUM(CASE WHEN {column('state')} IN ({placeholders}) THEN 1 ELSE 0 END)"

    counts = " || ',' || ".join(count(among) for among in POLICY_COUNTS.values())
    return (
        f"SELECT {counts} FROM {table} WHERE {column('tenant')} = %s AND {column('target_key')} = %s"  # noqa: S608
        f" AND {column('created_at')} >= %s AND NOT ({column('agent')} = %s AND {column('task_id')} = %s)"
    )


def read_policy_counts(text: str | None) -> dict:
    values = [int(value) for value in text.split(",")] if text else [0] * len(POLICY_COUNTS)
    return dict(zip(POLICY_COUNTS, values, strict=True))
