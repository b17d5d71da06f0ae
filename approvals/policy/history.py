"""The history of one target: earlier proposals of the same tool on the same thing (the same order, the
same recipient, the same resource), so a reviewer sees a likely duplicate before approving it and a
policy can count earlier outcomes (CEL `history.count_succeeded_24h`). Read only.

A proposal's target is `Proposal.target_key`, fixed at intake from the action: the tool and what it
acts on, spelled one way whatever the agent wrote (`target_identity`: "order:1182" for the target
"order:1182", "order_id=1182" or only the argument `order_id`). The admins' classification may name
the argument that holds a tool's target and declare tools equivalent (a refund and a credit of the same
order share one history): `evaluation.tool_classification`. An action with no target has no history.
"""

import re
import unicodedata
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from approvals.models import Proposal
from approvals.states import RELEASED, STARTED, WAITING_FOR_PEOPLE, State
from approvals.storage.history import target_counts_expression

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


# A target the agent wrote as one string: "order:1182", "order_id=1182", "Order #1182".
_KIND_AND_VALUE = re.compile(r"^\s*(?P<kind>[^\W\d][\w .-]{0,40}?)\s*[:=#]\s*(?P<value>.+?)\s*$")
# Suffixes that say "the identifier of": "order_id", "orderNumber", "order-ref" all name an order.
_KIND_SUFFIXES = ("id", "number", "no", "ref")
_NOT_KINDS = {"http", "https", "file", "mailto"}  # a URL's scheme is not what it names


def target_kind(name) -> str:
    """What an argument name says the thing is, however it is spelled: "order_id", "Order-ID", "order"
    and "orderNumber" are all "order"."""
    text = re.sub(r"[^0-9a-z]", "", unicodedata.normalize("NFKC", str(name)).casefold())
    for suffix in _KIND_SUFFIXES:
        if text.endswith(suffix) and len(text) > len(suffix):
            return text[: -len(suffix)]
    return text


def target_value(value) -> str:
    """A target's value as history compares it: Unicode-normalized (NFKC), trimmed, case-folded."""
    return unicodedata.normalize("NFKC", str(value)).strip().casefold()


def _scalar(value) -> bool:
    return value not in (None, "") and not isinstance(value, dict | list | bool)


def target_identity(action: dict, *, target_argument: str = "") -> str:
    """What an action acts on, independent of how the agent spells it: "order:1182" whether the agent
    sent `target: "order:1182"`, `target: "order_id=1182"` or only the argument `order_id: "1182"`.
    The admins' classification may name the argument that holds the target (`target_argument`); else
    the action's `target`, else the first key argument. "" when the action names none."""
    arguments = action.get("arguments") or {}
    if target_argument and _scalar(arguments.get(target_argument)):
        return f"{target_kind(target_argument)}:{target_value(arguments[target_argument])}"
    target = action.get("target")
    if _scalar(target):
        match = _KIND_AND_VALUE.match(str(target))
        if match and target_kind(match["kind"]) not in _NOT_KINDS:
            return f"{target_kind(match['kind'])}:{target_value(match['value'])}"
        return target_value(target)
    for name in KEY_ARGUMENTS:
        if _scalar(arguments.get(name)):
            return f"{target_kind(name)}:{target_value(arguments[name])}"
    return ""


def target_key(action: dict, *, tool_family: str = "", target_argument: str = "") -> str:
    """The history key of an action: its tool (or the name of the family of tools the admins declared
    equivalent, `tool_family`) and its target identity, "payments.refund|order:1182"; "" when the
    action names no target."""
    identity = target_identity(action, target_argument=target_argument)
    if not identity:
        return ""
    tool = tool_family or str(action.get("tool") or "")
    return f"{tool}|{identity}"[:TARGET_KEY_MAX]


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


def page_history(proposal: Proposal, window: timedelta = PAGE_WINDOW):
    """What the proposal page's "Earlier on the same target" lists, newest first: earlier_on_target()'s
    proposals and, unlike the policy's counts, this request's own earlier versions (the proposal an
    edit or the agent's answer replaced, and the ones before it), which a reviewer of the successor
    wants to see beside the rest and which are not duplicates of it. One query."""
    own_task = Q(agent_id=proposal.agent_id, task_id=proposal.task_id)
    earlier_versions = own_task & Q(created_at__lt=proposal.created_at)
    if not proposal.target_key:
        chosen = earlier_versions
    else:
        on_target = Q(target_key=proposal.target_key, created_at__gte=timezone.now() - window) & ~own_task
        chosen = on_target | earlier_versions
    return (
        Proposal.objects.filter(tenant_id=proposal.tenant_id)
        .filter(chosen)
        .exclude(pk=proposal.pk)
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
_COUNTED_STATES = tuple(None if among is None else tuple(sorted(among)) for among in POLICY_COUNTS.values())


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


def policy_counts_expression(proposal: Proposal):
    """policy_counts() as one scalar subquery of plain SQL (approvals/storage/history.py), for a caller that
    reads it in a query it makes anyway (intake, before the proposal is stored): one scan of the
    target's rows, every count at once, as "n,n,n,n,n" in POLICY_COUNTS order (read it with
    read_policy_counts; NULL when there is no row). The same rows as earlier_on_target; a proposal not
    stored yet cannot be among them, so its own id needs no exclusion. None without a target: its
    counts are all zero, no query needed."""
    if not proposal.target_key:
        return None
    return target_counts_expression(
        tenant_id=proposal.tenant_id,
        target_key=proposal.target_key,
        since=timezone.now() - POLICY_WINDOW,
        excluding_task=(proposal.agent_id, proposal.task_id),
        counts=_COUNTED_STATES,
    )


def read_policy_counts(text: str | None) -> dict:
    values = [int(value) for value in text.split(",")] if text else [0] * len(POLICY_COUNTS)
    return dict(zip(POLICY_COUNTS, values, strict=True))
