"""Page contexts of the two proposal lists: the queue (what a person can decide now) and the watching list."""

from collections import Counter
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.utils import timezone

from approvals.models import Agent, Policy
from approvals.policy.headline import action_headline, summary_mismatch
from approvals.selectors import throttled_agents
from approvals.states import State
from approvals.web import break_glass_pages, queries
from approvals.web.forms import QueueFilterForm

PAGE_SIZE = 25


def _filter_form(scope: queries.ReviewerScope, params, *, with_states=False) -> QueueFilterForm:
    agents = Agent.objects.filter(tenant_id__in=scope.tenant_ids).order_by("name").values_list("slug", "name")
    policies = (
        Policy.objects.filter(tenant_id__in=scope.tenant_ids)
        .order_by("name")
        .values_list("slug", "name")
        .distinct()
    )
    return QueueFilterForm(
        params or None,
        tenants=[(m.tenant.slug, m.tenant.name) for m in scope.memberships],
        agents=list(agents),
        policies=list(policies),
        states=[(s.value, s.label) for s in State] if with_states else (),
    )


def _rows(page, opened) -> list[dict]:
    """Each row leads with Reviewer's headline of the action as it is now (an edit shows the edited
    amount), then the agent's words with their mismatch; marked when new since `opened` or when another
    proposal on the same target was done, may be done or waits for people (one query for the page);
    with the policy versions each pinned (one more)."""
    duplicates = queries.targets_with_duplicates(page)
    pinned = queries.pinned_policy_refs(page)
    rows = []
    for proposal in page:
        thresholds = proposal.requirements.get("thresholds", [])
        edited = proposal.edited_by_id is not None
        rows.append(
            {
                "proposal": proposal,
                "headline": action_headline(proposal.action, proposal.consequences),
                "agent_words": proposal.summary[:140] + ("…" if len(proposal.summary) > 140 else ""),
                "mismatch": ""
                if edited
                else summary_mismatch(proposal.summary, proposal.action, proposal.consequences),
                "new": opened is not None and proposal.created_at > opened,
                "duplicate_of": proposal.pk in duplicates,
                "needed": sum(int(t.get("count", 0)) for t in thresholds),
                "groups": [t.get("group") for t in thresholds],
                "policies": pinned.get(proposal.pk, []),
            }
        )
    return rows


def _opened(params) -> datetime | None:
    """When the person opened the page (the socket's `opened`): rows after it are marked new."""
    try:
        opened = datetime.fromisoformat(str((params or {}).get("opened") or "")[:40])
    except ValueError:
        return None
    return opened if opened.tzinfo else None


QUEUE_ORDER = ("expires_at", "-risk_rank", "pk")  # the most urgent first; ties in expiry: the riskier
WATCHING_ORDER = ("-created_at", "-pk")  # the newest first


def _list_context(scope, params, queryset, *, order, with_states=False, counted=None) -> dict:
    """One page of a list, read by keyset (?after=<cursor>): the page, a count capped at
    queries.COUNT_CAP and the filter form cost the same few queries at 100 or 100,000 proposals.
    `counted(filters)` may give (total, capped) from a query the caller makes anyway."""
    form = _filter_form(scope, params, with_states=with_states)
    filters = form.filters()
    filtered = queries.apply_filters(queryset, filters)
    cursor = str((params or {}).get("after") or "")[:200]
    page = queries.keyset_page(queries.with_row_data(filtered), order, cursor, PAGE_SIZE)
    total, capped = (counted and counted(filters)) or queries.capped_count(filtered)
    after = {"after": cursor} if cursor and page.rows else {}
    now = timezone.now()
    opened = _opened(params)
    # A live update counts what arrived since the page opened, on this page or later ones.
    new_count = queries.capped_count(filtered.filter(created_at__gt=opened))[0] if opened else 0
    return {
        "form": form,
        "filters": filters,
        "rows": _rows(page.rows, opened),
        "new_count": new_count,
        "total": total,
        "total_capped": capped,
        "first_link": "?" + urlencode(filters) if after else "",
        "next_link": "?" + urlencode({**filters, "after": page.next_cursor}) if page.next_cursor else "",
        "socket_query": urlencode({**filters, **after, "opened": (opened or now).isoformat()}),
        "server_now": now,
        "votes": scope.votes,
    }


def queue_context(user, params, scope: queries.ReviewerScope | None = None) -> dict:
    """The queue page's context; `scope`: the person's, when the caller read it already."""
    scope = scope or queries.ReviewerScope.of(user)
    # Built once for the list and the chips (building it costs more than a small query does), so both
    # also ask about the same moment.
    decidable = queries.eligible_proposals(scope)
    chips: dict[str, Any] = {}

    def risks_and_count(filters):
        # The chips count what at most COUNT_CAP of the proposals (without the risk filter) hold:
        # exact below the cap, "N+" above it (a lower bound, still true). Without a risk filter the same
        # read is the list's count too.
        unrated = {k: v for k, v in filters.items() if k != "risk"}
        sample = queries.apply_filters(decidable, unrated).order_by()
        risks = list(sample.values_list("risk", flat=True)[: queries.COUNT_CAP + 1])
        chips.update(capped=len(risks) > queries.COUNT_CAP, by_risk=Counter(risks[: queries.COUNT_CAP]))
        return None if "risk" in filters else (min(len(risks), queries.COUNT_CAP), chips["capped"])

    context = _list_context(scope, params, decidable, order=QUEUE_ORDER, counted=risks_and_count)
    labels = [(value, label) for value, label in QueueFilterForm.RISKS if value] + [("", "Not rated")]
    by_risk = chips["by_risk"]
    context["risk_counts"] = [
        (label, f"{by_risk[value]}+" if chips["capped"] else by_risk[value])
        for value, label in labels
        if by_risk.get(value)
    ]
    context["post_hoc_reviews"] = break_glass_pages.queue_reviews(user)  # break-glass reviews owed
    admin_of = [m.tenant_id for m in scope.memberships if m.role == "admin"]
    context["is_tenant_admin"] = bool(admin_of)
    # Tenant admins hear that an agent hit a quota (its refused proposals are nowhere in the list).
    context["throttled"] = throttled_agents(admin_of, timezone.now()) if admin_of else []
    return context


def watching_context(user, params) -> dict:
    scope = queries.ReviewerScope.of(user)
    return _list_context(
        scope, params, queries.watching_proposals(scope), order=WATCHING_ORDER, with_states=True
    )
