"""Page-context builders: what the queue, the watching list and the proposal page show. The views render
them as whole pages and the WebSocket consumers send the same partials, so both import them from here
(never from views). Read only: they query (approvals/queries.py) and format; nothing here writes.
"""

import hashlib
import json
from collections import Counter
from decimal import Decimal, InvalidOperation
from urllib.parse import urlencode

from django.db.models import Prefetch
from django.template.loader import render_to_string
from django.utils import timezone

from accounts import passkeys
from approvals import break_glass_pages, classification, history, policy, queries, services, stepup
from approvals.forms import (
    DecisionForm,
    QueueFilterForm,
    RevokeForm,
)
from approvals.models import Agent, Decision, Policy, Proposal, Vote
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
    return {
        "form": form,
        "filters": filters,
        "rows": _rows(page.rows),
        "total": total,
        "total_capped": capped,
        "first_link": "?" + urlencode(filters) if after else "",
        "next_link": "?" + urlencode({**filters, "after": page.next_cursor}) if page.next_cursor else "",
        "socket_query": urlencode({**filters, **after}),
        "server_now": timezone.now(),
        "votes": scope.votes,
    }


def queue_context(user, params) -> dict:
    scope = queries.ReviewerScope.of(user)
    chips = {}

    def risks_and_count(filters):
        # The chips count what at most COUNT_CAP of the proposals (without the risk filter) hold:
        # exact below the cap, "N+" above it (a lower bound, still true). Without a risk filter the same
        # read is the list's count too.
        unrated = {k: v for k, v in filters.items() if k != "risk"}
        sample = queries.apply_filters(queries.eligible_proposals(scope), unrated).order_by()
        risks = list(sample.values_list("risk", flat=True)[: queries.COUNT_CAP + 1])
        chips.update(capped=len(risks) > queries.COUNT_CAP, by_risk=Counter(risks[: queries.COUNT_CAP]))
        return None if "risk" in filters else (min(len(risks), queries.COUNT_CAP), chips["capped"])

    context = _list_context(
        scope, params, queries.eligible_proposals(scope), order=QUEUE_ORDER, counted=risks_and_count
    )
    labels = [(value, label) for value, label in QueueFilterForm.RISKS if value] + [("", "Not rated")]
    by_risk = chips["by_risk"]
    context["risk_counts"] = [
        (label, f"{by_risk[value]}+" if chips["capped"] else by_risk[value])
        for value, label in labels
        if by_risk.get(value)
    ]
    context["post_hoc_reviews"] = break_glass_pages.queue_reviews(user)  # break-glass reviews owed
    context["is_tenant_admin"] = any(m.role == "admin" for m in scope.memberships)
    return context


def watching_context(user, params) -> dict:
    scope = queries.ReviewerScope.of(user)
    return _list_context(
        scope, params, queries.watching_proposals(scope), order=WATCHING_ORDER, with_states=True
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


def money(amount, currency=None) -> str:
    """An amount as a reviewer reads it: the currency first, then the figure with thousands grouping and
    the decimals the agent sent ("EUR 1,850.00"). A value that is not a number is shown as it came."""
    text = _display(amount)
    try:
        figure = format(Decimal(text.strip()), ",f")
    except (InvalidOperation, ValueError):
        figure = text
    return f"{_display(currency or '')} {figure}".strip()


def _amount(consequences: dict, arguments: dict) -> tuple[str, str]:
    """How much, and the agent's own figure when it differs from the arguments (what the digest binds)."""
    bound, bound_currency = arguments.get("amount"), arguments.get("currency")
    stated, stated_currency = consequences.get("amount"), consequences.get("currency")
    if bound in (None, ""):
        bound, bound_currency = stated, stated_currency
    shown = money(bound, bound_currency) if bound not in (None, "") else ""
    differs = (stated not in (None, "") and _display(stated) != _display(bound)) or (
        stated_currency and bound_currency and stated_currency != bound_currency
    )
    claim = money(stated, stated_currency) if differs else ""
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
EDITED_SUFFIX = " (edited)"


def _original_summary(proposal: Proposal) -> str:
    """The agent's summary, without the marker the edit service appends to it."""
    summary = proposal.summary or ""
    if proposal.edited_by_id and summary.endswith(EDITED_SUFFIX):
        return summary[: -len(EDITED_SUFFIX)]
    return summary


def _action_text(proposal: Proposal) -> str:
    """What the action does, from the action alone: the tool and its arguments."""
    arguments = proposal.action.get("arguments") or {}
    described = ", ".join(f"{key} = {_display(value)}" for key, value in sorted(arguments.items()))
    return f"Runs {proposal.tool}" + (f" with {described}" if described else " with no arguments")


def _edited_headline(proposal: Proposal, edit_changes: list[dict]) -> dict:
    """The heading of an edited proposal, derived from the action: the tool, the amount it moves and
    each changed argument with its earlier value ("Refund payment: USD 50.00 · amount 50.00, was 75.50")."""
    arguments = proposal.action.get("arguments") or {}
    parts = []
    if arguments.get("amount") not in (None, ""):
        parts.append(money(arguments.get("amount"), arguments.get("currency")))
    for change in edit_changes:
        now = change["after"]["text"] if change["after"] else "removed"
        was = change["before"]["text"] if change["before"] else "not set"
        parts.append(f"{change['label']} {now}, was {was}")
    return _capped(f"{_label(proposal.tool)}: " + " · ".join(parts) + " (edited by a reviewer)", 500)


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
    edited = proposal.edited_by_id is not None
    return {
        "proposal": proposal,
        # A reviewer's edit keeps the agent's summary, consequences and diff, which describe the original
        # request: the page leads with what the edited action does and shows the agent's words as theirs.
        "edited": edited,
        "headline": _edited_headline(proposal, edit_changes) if edited else _capped(proposal.summary, 500),
        "agent_summary": _capped(_original_summary(proposal), 500),
        "action_text": _capped(_action_text(proposal)) if edited else None,
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
    if mode == policy.PASSKEY:
        return "your passkey with every vote (a one-time code is not accepted)"
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
        # Every version that shaped the requirements, as the decision's `policies` claim names them.
        "pinned": list(proposal.policy_versions.select_related("policy").order_by("policy__slug", "version")),
        "tenant_default": policy.TENANT_DEFAULT_REF if proposal.requirements.get("tenant_default") else None,
        "thresholds": [
            {"group": groups.get(t["group"]), "slug": t["group"], "count": t["count"]}
            for t in proposal.requirements.get("thresholds", [])
        ],
        "step_up_text": _step_up_text(proposal.requirements.get("step_up", policy.PER_VOTE)),
        "self_approval": proposal.requirements.get("self_approval", False),
        "reversibility": proposal.reversibility,
        "reversibility_text": classification.REVERSIBILITY_CLASSES.get(proposal.reversibility, ""),
        "risk_hint": classification.risk_hint(proposal.tool),
        "why_not": why_not[1] if why_not else "",
        "my_groups": services.user_groups_for(proposal, user, groups) if why_not is None else [],
    }


# The heading of "what happens" follows the state: before a decision it is conditional, after it it says
# what was decided (the reviewer must not read "if this is approved" on a proposal already approved).
CONSEQUENCE_HEADINGS = {
    State.PROPOSED: "If this is approved",
    State.AWAITING_REVIEW: "If this is approved",
    State.INFO_REQUESTED: "If this is approved (waiting for the agent's answer)",
    State.ALLOWED: "Released by policy: the agent may now do this",
    State.APPROVED: "Approved: the agent may now do this",
    State.EXECUTING: "Approved: the agent is doing this",
    State.UNKNOWN: "Approved: the agent tried this; the result is unknown",
    State.SUCCEEDED: "Done: the agent reports this happened",
    State.FAILED: "Approved, but the agent reports it failed",
    State.DENIED: "Denied by policy: this will not happen",
    State.REJECTED: "Rejected: this will not happen",
    State.EXPIRED: "Expired: this will not happen",
    State.REVOKED: "Revoked: this will not happen",
    State.CANCELLED: "Cancelled: this will not happen",
    State.SUPERSEDED: "Replaced: this will not happen as written here",
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
        "open_for_votes": proposal.state == State.AWAITING_REVIEW,
        "consequence_heading": CONSEQUENCE_HEADINGS.get(proposal.state, "What was proposed"),
        "break_glass_record": break_glass_pages.release_record(proposal),
    }


def decision_mode(proposal: Proposal, user, live: dict, why_not: tuple[str, str] | None) -> tuple[str, str]:
    """Which controls the decision panel shows this person now, and why none when they cannot decide.
    Only what to show: the services decide again when the person acts."""
    return decision_mode_from(
        proposal,
        user.pk,
        live,
        why_not,
        may_revoke=lambda: services.may_revoke(proposal, user),
        role=lambda: services.tenant_role(user, proposal.tenant_id),
        closed_reason=lambda: services.closed_reason(proposal),
    )


def decision_mode_from(
    proposal: Proposal, user_id, live: dict, why_not, *, may_revoke, role, closed_reason
) -> tuple[str, str]:
    """decision_mode() over facts read elsewhere (the socket fan-out reads them once for every open page):
    `may_revoke`, `role` and `closed_reason` are callables, asked only when the rule gets there."""
    if proposal.state == State.AWAITING_REVIEW:
        if any(item["vote"].voter_id == user_id for item in live["votes"]):
            return "voted", ""
        if why_not:
            return "ineligible", why_not[1]
        if timezone.now() >= proposal.expires_at:
            return "closed", closed_reason()
        return "vote", ""
    decision = live["decision"]
    if proposal.state in RELEASED and decision and not decision.consumed_at and may_revoke():
        return "revocable", ""
    if proposal.state in STARTED and role() in DECIDING_ROLES:
        return "started", ""
    return "closed", closed_reason()


def _consequence_label(proposal: Proposal) -> dict:
    """What the decision buttons name after the verb, from the action: "refund" "of" "EUR 1,850.00"."""
    arguments = proposal.action.get("arguments") or {}
    what = proposal.tool.rsplit(".", 1)[-1].replace("_", " ")
    if arguments.get("amount") in (None, ""):
        return {"what": what, "amount": ""}
    return {"what": what, "amount": money(arguments.get("amount"), arguments.get("currency"))}


def my_vote(live: dict, user_id):
    """This person's vote among the page's votes, or None."""
    return next((item["vote"] for item in live["votes"] if item["vote"].voter_id == user_id), None)


def decision_context(
    proposal: Proposal,
    user,
    session,
    live: dict,
    why_not,
    *,
    form=None,
    revoke_form=None,
    notice: str = "",
    break_glass_form=None,
    mode: tuple[str, str] | None = None,
    has_passkey: bool | None = None,
    break_glass_rule=break_glass_pages.READ_RULE,
) -> dict:
    """The decision panel of this person; `mode`, `has_passkey` and `break_glass_rule` when the caller
    worked them out already (the fan-out reads them once for all its sockets)."""
    mode, reason = mode or decision_mode(proposal, user, live, why_not)
    step_up = proposal.requirements.get("step_up", policy.PER_VOTE)
    window = policy.step_up_window(step_up)
    fresh = window is not None and stepup.fresh_within(session, window)
    return {
        "proposal": proposal,
        "mode": mode,
        "why_not": reason,
        "form": form or DecisionForm(initial={"digest": proposal.action_digest}),
        "revoke_form": revoke_form or RevokeForm(),
        "consequence_label": _consequence_label(proposal),
        "needs_code": not fresh,
        # Passkeys: the page says before the person tries whether the policy needs one, and whether
        # they have one (static/js/passkeys.js asks for it on Approve, Reject or Ask).
        "needs_passkey": step_up == policy.PASSKEY,
        "has_passkey": passkeys.has_passkey(user) if has_passkey is None else has_passkey,
        "step_up_text": _step_up_text(step_up),
        "code_hint": code_hint(proposal),
        "my_vote": my_vote(live, user.pk),
        "missing_total": live["missing_total"],
        "decision": live["decision"],
        "notice": notice,
        "break_glass": break_glass_pages.panel(proposal, user, mode, break_glass_form, break_glass_rule),
    }


def _history_context(proposal: Proposal) -> dict:
    """Earlier proposals on the same target (approvals/history.py) as the page lists them, and whether
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
        arguments = other.action.get("arguments") or {}
        approvers = [
            vote.voter.get_full_name() or vote.voter.get_username()
            for vote in other.votes.all()
            if vote.verdict == Vote.Verdict.APPROVE
        ]
        items.append(
            {
                "proposal": other,
                "amount": money(arguments.get("amount"), arguments.get("currency"))
                if arguments.get("amount") not in (None, "")
                else "",
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


def detail_context(proposal: Proposal, user, session, post_hoc_form=None, **decision_kwargs) -> dict:
    """Everything the proposal page shows this person (the consumer re-renders its partials from it)."""
    groups = services.threshold_groups(proposal)
    live = live_context(proposal, groups)
    why_not = services.ineligibility(proposal, user)
    return {
        **reviewed_context(proposal),
        **live,
        "why": _why_context(proposal, user, groups, why_not),
        "history": _history_context(proposal),
        "successor": Proposal.objects.filter(supersedes=proposal).only("id", "state", "summary").first(),
        "decision_panel": decision_context(proposal, user, session, live, why_not, **decision_kwargs),
        "post_hoc": break_glass_pages.my_review(proposal, user, post_hoc_form),
    }
