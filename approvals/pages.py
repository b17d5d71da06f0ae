"""Page-context builders: what the queue, the watching list and the proposal page show. The views render
them as whole pages and the WebSocket consumers send the same partials, so both import them from here
(never from views). Read only: they query (approvals/queries.py) and format; nothing here writes.
"""

import hashlib
import json
from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.db.models import (
    Count,
)
from django.template.loader import render_to_string
from django.utils import timezone

from approvals import policy, queries, services, stepup
from approvals.forms import (
    DecisionForm,
    QueueFilterForm,
    RevokeForm,
)
from approvals.models import Agent, Decision, Policy, Proposal
from approvals.states import RELEASED, STARTED, State
from tenants.queries import DECIDING_ROLES

PAGE_SIZE = 25
# Agent text is untrusted and can be long: cap what a page shows and say so when it is cut.
TEXT_CAP = 2000
EXCERPT_CAP = 600


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


def _rows(page) -> list[dict]:
    rows = []
    for proposal in page:
        thresholds = proposal.requirements.get("thresholds", [])
        rows.append(
            {
                "proposal": proposal,
                "needed": sum(int(t.get("count", 0)) for t in thresholds),
                "groups": [t.get("group") for t in thresholds],
                "policies": [f"{v.policy.slug}@{v.version}" for v in proposal.policy_versions.all()],
            }
        )
    return rows


def _list_context(scope, params, queryset, *, order, with_states=False) -> dict:
    form = _filter_form(scope, params, with_states=with_states)
    filters = form.filters()
    filtered = queries.apply_filters(queryset, filters)
    paginator = Paginator(queries.with_row_data(filtered).order_by(*order), PAGE_SIZE)
    page = paginator.get_page((params or {}).get("page"))

    def page_link(number):
        return "?" + urlencode({**filters, "page": number})

    return {
        "form": form,
        "filters": filters,
        "page": page,
        "rows": _rows(page),
        "total": paginator.count,
        "previous_link": page_link(page.previous_page_number()) if page.has_previous() else "",
        "next_link": page_link(page.next_page_number()) if page.has_next() else "",
        "socket_query": urlencode({**filters, **({"page": page.number} if page.number > 1 else {})}),
        "server_now": timezone.now(),
        "votes": scope.votes,
    }


def queue_context(user, params) -> dict:
    scope = queries.ReviewerScope.of(user)
    context = _list_context(scope, params, queries.eligible_proposals(scope), order=("expires_at", "pk"))
    by_risk = dict(
        queries.apply_filters(
            queries.eligible_proposals(scope), {k: v for k, v in context["filters"].items() if k != "risk"}
        )
        .values_list("risk")
        .annotate(n=Count("pk"))
        .order_by()
    )
    labels = [(value, label) for value, label in QueueFilterForm.RISKS if value] + [("", "Not rated")]
    context["risk_counts"] = [(label, by_risk[value]) for value, label in labels if by_risk.get(value)]
    return context


def watching_context(user, params) -> dict:
    scope = queries.ReviewerScope.of(user)
    return _list_context(
        scope, params, queries.watching_proposals(scope), order=("-created_at", "-pk"), with_states=True
    )


def _capped(value, limit=TEXT_CAP) -> dict:
    text = _display(value)
    return {"text": text[:limit], "truncated": len(text) > limit, "length": len(text)}


def _display(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _label(key: str) -> str:
    return str(key).replace("_", " ").replace(".", " › ").strip().capitalize() or "(unnamed)"


def _amount(consequences: dict, arguments: dict) -> tuple[str, str]:
    """How much, and the agent's own figure when it differs from the arguments (what the digest binds)."""
    bound, bound_currency = arguments.get("amount"), arguments.get("currency")
    stated, stated_currency = consequences.get("amount"), consequences.get("currency")
    if bound in (None, ""):
        bound, bound_currency = stated, stated_currency
    shown = f"{_display(bound)} {_display(bound_currency or '')}".strip() if bound not in (None, "") else ""
    differs = (stated not in (None, "") and _display(stated) != _display(bound)) or (
        stated_currency and bound_currency and stated_currency != bound_currency
    )
    claim = f"{_display(stated)} {_display(stated_currency or '')}".strip() if differs else ""
    return shown, claim


def _consequence(proposal: Proposal) -> dict:
    """What happens, to whom, how much, whether it can be undone, and which data leaves: in the agent's
    words, in a fixed order, with what the agent did not state said plainly."""
    facts = dict(proposal.consequences or {})
    amount, claim = _amount(facts, proposal.action.get("arguments") or {})
    facts.pop("amount", None)
    facts.pop("currency", None)
    reversible = facts.pop("reversible", None)
    data_leaves = facts.pop("data_leaves", None)
    effect = facts.pop("effect", None)
    return {
        "summary": _capped(proposal.summary, 500),
        "effect": _capped(effect) if effect not in (None, "") else None,
        "amount": _capped(amount) if amount else None,
        "amount_mismatch": _capped(claim) if claim else None,
        "target": _capped(proposal.action.get("target")) if proposal.action.get("target") else None,
        "principal": proposal.principal_display or proposal.principal_id,
        "principal_id": proposal.principal_id,
        "reversible": reversible if isinstance(reversible, bool) else None,
        "reversible_text": (
            _capped(reversible) if reversible is not None and not isinstance(reversible, bool) else None
        ),
        "data_leaves": None if data_leaves in (None, "") else _capped(data_leaves),
        "no_data_leaves": (
            isinstance(data_leaves, str) and data_leaves.strip().lower() in {"none", "no", "nothing"}
        ),
        "other": [{"label": _label(k), "value": _capped(v)} for k, v in sorted(facts.items())],
    }


def _argument_changes(before: dict, after: dict) -> list[dict]:
    keys_in_order = sorted(set(before) | set(after))
    return [
        {
            "label": key,
            "before": _capped(before.get(key)) if key in before else None,
            "after": _capped(after.get(key)) if key in after else None,
        }
        for key in keys_in_order
        if before.get(key, _MISSING) != after.get(key, _MISSING)
    ]


_MISSING = object()


def reviewed_context(proposal: Proposal) -> dict:
    """What the reviewer reads before deciding. Built from the proposal's immutable fields only, so the
    same page renders the same bytes; their sha256 (`page_hash`) goes into the vote's audit event."""
    arguments = proposal.action.get("arguments") or {}
    predecessor = proposal.supersedes
    changed_keys = set()
    edit_changes = []
    if predecessor is not None:
        edit_changes = _argument_changes(predecessor.action.get("arguments") or {}, arguments)
        changed_keys = {change["label"] for change in edit_changes}
    return {
        "proposal": proposal,
        "consequence": _consequence(proposal),
        # Sorted, as in the canonical form: PostgreSQL's jsonb does not keep the agent's key order anyway.
        "arguments": [
            {"label": key, "value": _capped(value), "changed": key in changed_keys}
            for key, value in sorted(arguments.items())
        ],
        "other_action_fields": [
            {"label": _label(k), "value": _capped(v)}
            for k, v in proposal.action.items()
            if k not in {"tool", "arguments", "target"}
        ],
        "diff": [
            {
                "field": _capped(entry.get("field"), 200),
                "before": _capped(entry.get("before")),
                "after": _capped(entry.get("after")),
                "changed": entry.get("before") != entry.get("after"),
            }
            for entry in proposal.diff or []
        ],
        "evidence": [
            {
                "title": _capped(item.get("title") or "Untitled evidence", 200),
                "url": item.get("url") or "",
                "excerpt": _capped(item.get("excerpt"), EXCERPT_CAP),
            }
            for item in proposal.evidence or []
        ],
        "predecessor": predecessor,
        "edit_changes": edit_changes,
    }


REVIEWED_PARTIALS = ("consequence", "material", "canonical")


def page_hash(proposal: Proposal) -> str:
    """sha256 over the rendered consequence, arguments (with diff and evidence) and canonical action +
    digest sections of the proposal page: the audit records what the reviewer was shown."""
    context = reviewed_context(proposal)
    digest = hashlib.sha256()
    for name in REVIEWED_PARTIALS:
        digest.update(render_to_string(f"approvals/detail.html#{name}", context).encode())
    return "sha256:" + digest.hexdigest()


def _step_up_text(mode: str) -> str:
    if mode == policy.PER_VOTE:
        return "a fresh one-time code with every vote"
    minutes, seconds = divmod(int(mode), 60)
    return f"a one-time code entered within the last {minutes} min" + (f" {seconds} s" if seconds else "")


def code_hint(proposal: Proposal) -> str:
    """The hint under the one-time code field of the decision and edit forms."""
    mode = proposal.requirements.get("step_up", policy.PER_VOTE)
    return f"Six digits from your authenticator app, or a backup code: this needs {_step_up_text(mode)}."


def _why_context(proposal: Proposal, user, groups: dict, why_not: tuple[str, str] | None) -> dict:
    return {
        "pinned": list(proposal.policy_versions.select_related("policy").order_by("policy__slug")),
        "thresholds": [
            {"group": groups.get(t["group"]), "slug": t["group"], "count": t["count"]}
            for t in proposal.requirements.get("thresholds", [])
        ],
        "step_up_text": _step_up_text(proposal.requirements.get("step_up", policy.PER_VOTE)),
        "self_approval": proposal.requirements.get("self_approval", False),
        "why_not": why_not[1] if why_not else "",
        "my_groups": services.user_groups_for(proposal, user, groups) if why_not is None else [],
    }


def live_context(proposal: Proposal, groups: dict | None = None) -> dict:
    """State, time left, quorum progress and votes: the part of the page that changes while it is open."""
    groups = groups if groups is not None else services.threshold_groups(proposal)
    quorum = services.count_quorum(proposal)
    placed = {vote.pk: slug for slug, votes in quorum.slots.items() for vote in votes}
    votes = list(proposal.votes.select_related("voter").order_by("created_at"))
    progress = []
    for threshold in quorum.required:
        filled = quorum.slots.get(threshold["group"], [])
        progress.append(
            {
                "group": groups.get(threshold["group"]),
                "slug": threshold["group"],
                "count": int(threshold["count"]),
                "filled": filled,
                "missing": max(int(threshold["count"]) - len(filled), 0),
                "slots": [True] * len(filled) + [False] * max(int(threshold["count"]) - len(filled), 0),
            }
        )
    return {
        "proposal": proposal,
        "quorum": quorum,
        "progress": progress,
        "missing_total": sum(item["missing"] for item in progress),
        "votes": [
            {"vote": vote, "group": groups.get(placed.get(vote.pk)), "counts": vote.pk in placed}
            for vote in votes
        ],
        "decision": Decision.objects.filter(proposal=proposal).first(),
        "server_now": timezone.now(),
    }


def decision_mode(proposal: Proposal, user, live: dict, why_not: tuple[str, str] | None) -> tuple[str, str]:
    """Which controls the decision panel shows this person now, and why none when they cannot decide.
    Only what to show: the services decide again when the person acts."""
    if proposal.state == State.AWAITING_REVIEW:
        if any(item["vote"].voter_id == user.pk for item in live["votes"]):
            return "voted", ""
        if why_not:
            return "ineligible", why_not[1]
        if timezone.now() >= proposal.expires_at:
            return (
                "ineligible",
                "it expired by the server's clock; nothing will run, and the agent must ask again",
            )
        return "vote", ""
    decision = live["decision"]
    if (
        proposal.state in RELEASED
        and decision
        and not decision.consumed_at
        and services.may_revoke(proposal, user)
    ):
        return "revocable", ""
    role = services.tenant_role(user, proposal.tenant_id)
    if proposal.state in STARTED and role in DECIDING_ROLES:
        return "started", ""
    return "closed", ""


def decision_context(
    proposal: Proposal, user, session, live: dict, why_not, *, form=None, revoke_form=None, notice: str = ""
) -> dict:
    mode, reason = decision_mode(proposal, user, live, why_not)
    step_up = proposal.requirements.get("step_up", policy.PER_VOTE)
    fresh = step_up != policy.PER_VOTE and stepup.fresh_within(session, int(step_up))
    return {
        "proposal": proposal,
        "mode": mode,
        "why_not": reason,
        "form": form or DecisionForm(initial={"digest": proposal.action_digest}),
        "revoke_form": revoke_form or RevokeForm(),
        "needs_code": not fresh,
        "step_up_text": _step_up_text(step_up),
        "code_hint": code_hint(proposal),
        "my_vote": next((item["vote"] for item in live["votes"] if item["vote"].voter_id == user.pk), None),
        "missing_total": live["missing_total"],
        "decision": live["decision"],
        "notice": notice,
    }


def detail_context(proposal: Proposal, user, session, **decision_kwargs) -> dict:
    """Everything the proposal page shows this person (the consumer re-renders its partials from it)."""
    groups = services.threshold_groups(proposal)
    live = live_context(proposal, groups)
    why_not = services.ineligibility(proposal, user)
    return {
        **reviewed_context(proposal),
        **live,
        "why": _why_context(proposal, user, groups, why_not),
        "successor": Proposal.objects.filter(supersedes=proposal).only("id", "state", "summary").first(),
        "decision_panel": decision_context(proposal, user, session, live, why_not, **decision_kwargs),
    }
