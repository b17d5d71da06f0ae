"""Page-context builders of the proposal page (the two lists are list_pages.py). The views render
them as whole pages and the WebSocket consumers send the same partials, so both import them from here
(never from views). Read only: they query (approvals/web/queries.py) and format; nothing here writes.
"""

import hashlib

from django.template.loader import render_to_string
from django.utils import timezone

from accounts import passkeys, stepup
from approvals import stepup as vote_step_up
from approvals.models import Decision, Proposal, Vote
from approvals.policy import break_glass, classification
from approvals.policy.evaluation import TENANT_DEFAULT_REF
from approvals.policy.headline import action_headline, amount_currency, money, summary_mismatch
from approvals.policy.step_up import PASSKEY, PER_VOTE, mode_of, step_up_window
from approvals.selectors import VoterSlots, ineligibility, threshold_groups, viewer_slots
from approvals.services import lifecycle
from approvals.services.quorum import count_quorum
from approvals.states import OPEN_FOR_VOTES, RELEASED, STARTED, State
from approvals.web import break_glass_pages
from approvals.web import grants as grant_pages
from approvals.web.display import EXCERPT_CAP, capped, display_text, fact_text, label_text
from approvals.web.forms import DecisionForm, RevokeForm
from approvals.web.history_panel import history_context
from lib import agent_text
from tenants.models import TenantMembership
from tenants.queries import DECIDING_ROLES


def _amount(consequences: dict, arguments: dict) -> tuple[str, str, str]:
    """How much (always with its currency), the note on a currency the digest does not bind, and the
    agent's own figure when it differs from the arguments (what the digest binds)."""
    bound = arguments.get("amount")
    bound_currency, note = amount_currency(arguments, consequences)
    stated, stated_currency = consequences.get("amount"), consequences.get("currency")
    if bound in (None, ""):
        bound, bound_currency, note = stated, str(stated_currency or ""), ""
    shown = money(bound, bound_currency) if bound not in (None, "") else ""
    differs = (stated not in (None, "") and display_text(stated) != display_text(bound)) or (
        stated_currency and bound_currency and stated_currency != bound_currency
    )
    claim = money(stated, stated_currency) if differs else ""
    return shown, (note if shown else ""), claim


def _agent_reversibility_words(consequences: dict) -> str:
    """What the agent said about undoing it, as its words ("reversible", "R1"), or "" for nothing."""
    stated = consequences.get("reversibility")
    reversible = consequences.get("reversible")
    if isinstance(reversible, bool):
        words = "reversible" if reversible else "not reversible"
        return f"{stated} ({words})" if stated not in (None, "") else words
    parts = [display_text(value) for value in (stated, reversible) if value not in (None, "")]
    return "; ".join(parts)


def _consequence(proposal: Proposal) -> dict:
    """What happens, to whom, how much, whether it can be undone, and which data leaves: in the agent's
    words, in a fixed order, with what the agent did not state said plainly."""
    facts = dict(proposal.consequences or {})
    amount, currency_note, claim = _amount(facts, proposal.action.get("arguments") or {})
    facts.pop("amount", None)
    facts.pop("currency", None)
    agent_reversible = _agent_reversibility_words(facts)
    facts.pop("reversible", None)
    facts.pop("reversibility", None)
    data_leaves = facts.pop("data_leaves", None)
    effect = facts.pop("effect", None)
    headline = action_headline(proposal.action, proposal.consequences)
    return {
        "summary": capped(proposal.summary, 500),
        "effect": capped(effect) if effect not in (None, "") else None,
        "amount": capped(amount) if amount else None,
        "currency_note": currency_note,
        "amount_mismatch": capped(claim) if claim else None,
        # "To whom / what" shows the headline's target and recipient (read from the action, as the
        # heading is); one that is a look-alike or hides characters is marked there, and the warning in
        # words is the heading's.
        "flagged": bool(agent_text.warnings(headline.target) or agent_text.warnings(headline.recipient)),
        "principal": proposal.principal_display or proposal.principal_id,
        "principal_id": proposal.principal_id,
        # Reviewer's class, fixed at intake: the strictest of the agent's statement and the admins'
        # classification (approvals/policy/classification.py); the agent's words are shown beside it.
        "reversibility": proposal.reversibility or classification.UNCLASSIFIED,
        "agent_reversible": capped(agent_reversible, 500) if agent_reversible else None,
        "data_leaves": None if data_leaves in (None, "") else capped(data_leaves),
        "no_data_leaves": (
            isinstance(data_leaves, str) and data_leaves.strip().lower() in {"none", "no", "nothing"}
        ),
        "other": [{"label": label_text(k), "value": capped(fact_text(v))} for k, v in sorted(facts.items())],
    }


def _argument_changes(before: dict, after: dict) -> list[dict]:
    keys_in_order = sorted(set(before) | set(after))
    return [
        {
            "label": key,
            "before": capped(before.get(key)) if key in before else None,
            "after": capped(after.get(key)) if key in after else None,
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
    described = ", ".join(f"{key} = {display_text(value)}" for key, value in sorted(arguments.items()))
    return f"Runs {proposal.tool}" + (f" with {described}" if described else " with no arguments")


def _edit_note(edit_changes: list[dict]) -> dict:
    """What follows the headline of an edited proposal: each changed argument with its earlier value
    ("amount 50.00, was 75.50 (edited by a reviewer)")."""
    parts = []
    for change in edit_changes:
        now = change["after"]["text"] if change["after"] else "removed"
        was = change["before"]["text"] if change["before"] else "not set"
        parts.append(f"{change['label']} {now}, was {was}")
    return capped(" · ".join(parts) + " (edited by a reviewer)", 500)


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
        # Reviewer's own headline, from the canonical arguments (what runs), never the agent's summary.
        "headline": action_headline(proposal.action, proposal.consequences),
        "edit_note": _edit_note(edit_changes) if edited else None,
        "agent_summary": capped(_original_summary(proposal), 500),
        "summary_mismatch": ""
        if edited
        else summary_mismatch(proposal.summary, proposal.action, proposal.consequences),
        "action_text": capped(_action_text(proposal)) if edited else None,
        "consequence": _consequence(proposal),
        # Sorted, as in the canonical form: PostgreSQL's jsonb does not keep the agent's key order anyway.
        "arguments": [
            {"label": key, "value": capped(value), "changed": key in changed_keys}
            for key, value in sorted(arguments.items())
        ],
        "other_action_fields": [
            {"label": label_text(k), "value": capped(v)}
            for k, v in proposal.action.items()
            if k not in {"tool", "arguments", "target"}
        ],
        "diff": [
            {
                "field": capped(entry.get("field"), 200),
                "before": capped(entry.get("before")),
                "after": capped(entry.get("after")),
                "changed": entry.get("before") != entry.get("after"),
            }
            for entry in proposal.diff or []
        ],
        "evidence": [
            {
                "title": capped(item.get("title") or "Untitled evidence", 200),
                "url": item.get("url") or "",
                "excerpt": capped(item.get("excerpt"), EXCERPT_CAP),
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
    """What one vote needs, worded to follow "Each vote needs" and "this needs"."""
    if mode == PASSKEY:
        return "your passkey (a one-time code is not accepted)"
    if mode == PER_VOTE:
        return "a fresh one-time code"
    minutes, seconds = divmod(int(mode), 60)
    return f"a one-time code entered within the last {minutes} min" + (f" {seconds} s" if seconds else "")


def code_hint(proposal: Proposal) -> str:
    """The hint under the one-time code field of the decision and edit forms."""
    mode = mode_of(proposal.requirements)
    return f"Six digits from your authenticator app, or a backup code: this needs {_step_up_text(mode)}."


def _pinned_versions(proposal: Proposal) -> list:
    """Every version that shaped the requirements, as the decision's `policies` claim names them."""
    return list(proposal.policy_versions.select_related("policy").order_by("policy__slug", "version"))


def _why_context(
    proposal: Proposal, slots: VoterSlots, why_not: tuple[str, str] | None, pinned: list
) -> dict:
    groups = slots.groups
    return {
        "pinned": pinned,
        "tenant_default": TENANT_DEFAULT_REF if proposal.requirements.get("tenant_default") else None,
        "thresholds": [
            {"group": groups.get(t["group"]), "slug": t["group"], "count": t["count"]}
            for t in proposal.requirements.get("thresholds", [])
        ],
        "step_up_text": _step_up_text(mode_of(proposal.requirements)),
        "self_approval": proposal.requirements.get("self_approval", False),
        "reversibility": proposal.reversibility,
        "reversibility_text": classification.REVERSIBILITY_CLASSES.get(proposal.reversibility, ""),
        "risk_hint": classification.risk_hint(proposal.tool),
        "why_not": why_not[1] if why_not else "",
        "my_groups": slots.own_groups() if why_not is None else [],
    }


# The heading of "what happens" follows the state: before a decision it is conditional, after it it says
# what was decided (the reviewer must not read "if this is approved" on a proposal already approved).
CONSEQUENCE_HEADINGS: dict[str, str] = {
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


def _decision_of(proposal: Proposal) -> Decision | None:
    """The proposal's signed decision: as the page's read joined it (selectors.PAGE_JOINS), else read."""
    if Proposal.decision.is_cached(proposal):
        return getattr(proposal, "decision", None)  # None: the join found none
    return Decision.objects.filter(proposal=proposal).first()


def live_context(proposal: Proposal, groups: dict | None = None) -> dict:
    """State, time left, quorum progress and votes: the part of the page that changes while it is open."""
    groups = groups if groups is not None else threshold_groups(proposal)
    quorum = count_quorum(proposal, groups=groups)
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
            {
                "vote": vote,
                "group": groups.get(placed[vote.pk]) if vote.pk in placed else None,
                "counts": vote.pk in placed,
            }
            for vote in votes
        ],
        "decision": _decision_of(proposal),
        "server_now": timezone.now(),
        "open_for_votes": proposal.state in OPEN_FOR_VOTES,
        "consequence_heading": CONSEQUENCE_HEADINGS.get(proposal.state, "What was proposed"),
        "break_glass_record": break_glass_pages.release_record(proposal),
    }


def decision_mode(
    proposal: Proposal, user, live: dict, why_not: tuple[str, str] | None, slots: VoterSlots | None = None
) -> tuple[str, str]:
    """Which controls the decision panel shows this person now, and why none when they cannot decide.
    Only what to show: the services decide again when the person acts. `slots`: the person's, when the
    caller has them (their role is read once)."""
    slots = slots or VoterSlots(proposal, user)
    return decision_mode_from(
        proposal,
        user.pk,
        live,
        why_not,
        may_revoke=lambda: may_revoke_from(slots.role, live, user.pk),
        role=lambda: slots.role,
        closed_reason=lambda: lifecycle.closed_reason(proposal),
    )


def may_revoke_from(role: str | None, live: dict, user_id) -> bool:
    """services.decisions.may_revoke's rule over what the page read: a tenant admin, or a person who
    approved it (among the page's votes)."""
    return role == TenantMembership.Role.ADMIN or any(
        item["vote"].voter_id == user_id and item["vote"].verdict == Vote.Verdict.APPROVE
        for item in live["votes"]
    )


def decision_mode_from(
    proposal: Proposal, user_id, live: dict, why_not, *, may_revoke, role, closed_reason
) -> tuple[str, str]:
    """decision_mode() over facts read elsewhere (the socket fan-out reads them once for every open page):
    `may_revoke`, `role` and `closed_reason` are callables, asked only when the rule gets there."""
    if proposal.state in OPEN_FOR_VOTES:
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


def consequence_label(proposal: Proposal) -> dict:
    """What the decision buttons name after the verb, from the action: "refund" "of" "EUR 1,850.00"."""
    arguments = proposal.action.get("arguments") or {}
    what = proposal.tool.rsplit(".", 1)[-1].replace("_", " ")
    if arguments.get("amount") in (None, ""):
        return {"what": what, "amount": ""}
    currency, _ = amount_currency(arguments, proposal.consequences)
    return {"what": what, "amount": money(arguments.get("amount"), currency)}


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
    has_code_device: bool | None = None,
    has_identity: bool | None = None,
    break_glass_rule=break_glass_pages.READ_RULE,
    provider=vote_step_up.NOT_READ,
) -> dict:
    """The decision panel of this person; `mode`, `has_passkey`, `has_code_device`, `break_glass_rule`,
    `provider` and `has_identity` (at that provider) when the caller worked them out already (the
    fan-out reads them once for all its sockets)."""
    shown, reason = mode or decision_mode(proposal, user, live, why_not)
    step_up = mode_of(proposal.requirements)
    window = step_up_window(step_up)
    fresh = window is not None and stepup.fresh_within(session, window)
    has_passkey = passkeys.has_passkey(user) if has_passkey is None else has_passkey
    if has_code_device is None and shown == "vote" and not has_passkey:
        has_code_device = bool(vote_step_up.code_owners_among([user.pk]))
    panel_provider = (
        vote_step_up.provider_panel(proposal, session, provider, user=user, has_identity=has_identity)
        if shown == "vote"
        else None
    )
    return {
        "proposal": proposal,
        "mode": shown,
        "why_not": reason,
        "form": form or DecisionForm(initial={"digest": proposal.action_digest}),
        "revoke_form": revoke_form or RevokeForm(),
        "consequence_label": consequence_label(proposal),
        "needs_code": not fresh,
        # Passkeys: the page says before the person tries whether the policy needs one, and whether
        # they have one (static/js/passkeys.js asks for it on Approve, Reject or Ask).
        "needs_passkey": step_up == PASSKEY,
        "has_passkey": has_passkey,
        # A person with no factor at all (signed in through the provider, never enrolled) is shown the
        # way to one rather than a code field they cannot fill.
        "no_factor": shown == "vote" and not has_passkey and not has_code_device,
        "step_up_text": _step_up_text(step_up),
        "provider": panel_provider,
        "code_hint": code_hint(proposal),
        "my_vote": my_vote(live, user.pk),
        "missing_total": live["missing_total"],
        "decision": live["decision"],
        "notice": notice,
        "break_glass": break_glass_pages.panel(
            proposal, user, shown, break_glass_form, break_glass_rule, missing=live["missing_total"]
        ),
    }


def detail_context(proposal: Proposal, user, session, post_hoc_form=None, **decision_kwargs) -> dict:
    """Everything the proposal page shows this person (the consumer re-renders its partials from it)."""
    # The groups and this person's slots in them, read once for the eligibility, "your groups" and the
    # quorum; their role and whether they are the principal came with the proposal (proposal_for_user).
    slots = viewer_slots(proposal, user, threshold_groups(proposal))
    live = live_context(proposal, slots.groups)
    why_not = ineligibility(proposal, user, slots)
    # The pinned versions, read once for "why" and for the break-glass rule (their intersection).
    pinned = _pinned_versions(proposal)
    decision_kwargs.setdefault("mode", decision_mode(proposal, user, live, why_not, slots))
    decision_kwargs.setdefault("break_glass_rule", break_glass.rule_for(proposal.requirements, pinned))
    return {
        **reviewed_context(proposal),
        **live,
        "why": _why_context(proposal, slots, why_not, pinned),
        "history": history_context(proposal),
        "successor": Proposal.objects.filter(supersedes=proposal).only("id", "state", "summary").first(),
        "decision_panel": decision_context(proposal, user, session, live, why_not, **decision_kwargs),
        "post_hoc": break_glass_pages.my_review(proposal, user, post_hoc_form, live["break_glass_record"]),
        "grant_panel": grant_pages.proposal_panel(proposal),
    }
