"""The batch page (/batches/<id>/): every member's consequence in one table, the totals per currency,
what differs between members, and one decision on the manifest the page shows
(approvals/services/batches.py). The form posts the manifest digest it rendered, so a vote on a batch
that changed since is refused (`stale_manifest`)."""

import hashlib
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import messages
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from accounts import stepup
from accounts.forms import normalized_code
from approvals.models import Batch, BatchMember, Proposal
from approvals.policy.batching import amount_of, totals_of
from approvals.policy.headline import money
from approvals.selectors import VoterSlots, tenant_role
from approvals.services.batches import cast_batch_vote, may_revoke_batch, revoke_batch
from approvals.services.votes import check_words, refusal_to_vote
from approvals.states import OPEN_FOR_VOTES, RELEASED
from approvals.web.display import capped, display_text, label_text
from approvals.web.forms import one_time_code_field
from lib.decorators import verified_required
from lib.errors import ServiceError

HISTORY_DAYS = 7
# Agent text in a table cell: short, the rest is on the member's own page.
CELL_CAP = 120


class BatchDecisionForm(forms.Form):
    """Approve and Reject are named submit buttons of this one form, equal in weight; `approve` lists the
    members to approve where the batch's policy allows a subset."""

    action = forms.ChoiceField(
        choices=(("approve", "Approve"), ("reject", "Reject")),
        error_messages={
            "required": "Choose Approve or Reject.",
            "invalid_choice": "Choose Approve or Reject.",
        },
    )
    manifest = forms.CharField(max_length=80, widget=forms.HiddenInput)
    approve = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)
    reason = forms.CharField(
        label="Reason", required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 3})
    )
    otp_code = one_time_code_field()

    def __init__(self, *args: Any, waiting: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        approve = self.fields["approve"]
        assert isinstance(approve, forms.MultipleChoiceField)
        approve.choices = [(request_id, request_id) for request_id in waiting]

    def clean_otp_code(self) -> str:
        return normalized_code(self.cleaned_data.get("otp_code"))


class BatchRevokeForm(forms.Form):
    reason = forms.CharField(label="Why revoke it", max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", "revoke_%s")  # shares the page with the decision form's `reason`
        super().__init__(*args, **kwargs)


def _batch_for_reviewer(request: HttpRequest, batch_pk: Any) -> tuple[Batch, str]:
    batch = Batch.objects.select_related("agent", "tenant").filter(pk=batch_pk).first()
    role = tenant_role(request.user, batch.tenant_id) if batch is not None else None
    if batch is None or role is None:
        raise Http404("no such batch")
    return batch, role


def _rows(batch: Batch) -> list[dict[str, Any]]:
    members = list(batch.members.select_related("proposal").order_by("position"))
    proposals = [m.proposal for m in members]
    keys = Counter(
        p.target_key
        for p, m in zip(proposals, members, strict=True)
        if p.target_key and m.standing == BatchMember.Standing.IN
    )
    since = timezone.now() - timedelta(days=HISTORY_DAYS)
    earlier = dict(
        Proposal.objects.filter(tenant_id=batch.tenant_id, target_key__in=list(keys), created_at__gte=since)
        .exclude(pk__in=[p.pk for p in proposals])
        .values("target_key")
        .annotate(n=Count("id"))
        .values_list("target_key", "n")
    )
    rows = []
    for member, proposal in zip(members, proposals, strict=True):
        arguments = proposal.action.get("arguments") or {}
        stated = amount_of(arguments)
        rows.append(
            {
                "member": member,
                "proposal": proposal,
                "in_manifest": member.standing == BatchMember.Standing.IN,
                "target": capped(
                    proposal.target_key.split("|", 1)[-1] if proposal.target_key else "", CELL_CAP
                ),
                "amount": money(arguments.get("amount"), arguments.get("currency")) if stated else "",
                "no_currency": stated is not None and not stated[1],
                "duplicate": bool(proposal.target_key) and keys[proposal.target_key] > 1,
                "earlier": earlier.get(proposal.target_key, 0),
                "summary": capped(proposal.summary, CELL_CAP),
                "open": proposal.state in OPEN_FOR_VOTES and member.standing == BatchMember.Standing.IN,
            }
        )
    return rows


def _differences(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The arguments whose values differ between the members in the manifest (a column each, and the
    tool when the members use several), and those that are the same for all (shown once)."""
    actions = [row["proposal"].action for row in rows if row["in_manifest"]]
    keys = sorted({key for action in actions for key in (action.get("arguments") or {})})
    differing, same = [], []
    for key in keys:
        values = [display_text((action.get("arguments") or {}).get(key)) for action in actions]
        if len(set(values)) > 1:
            differing.append(key)
        else:
            same.append({"label": label_text(key), "value": capped(values[0], CELL_CAP)})
    tools_differ = len({action.get("tool") for action in actions}) > 1
    labels = (["Tool"] if tools_differ else []) + [label_text(key) for key in differing]
    for row in rows:
        action = row["proposal"].action
        arguments = action.get("arguments") or {}
        values = ([action.get("tool")] if tools_differ else []) + [
            arguments.get(key, "") for key in differing
        ]
        row["varying"] = [
            {"label": label, "value": capped(value, CELL_CAP)}
            for label, value in zip(labels, values, strict=True)
        ]
    return same, labels


def batch_context(
    batch: Batch,
    user: Any,
    role: str,
    *,
    form: BatchDecisionForm | None = None,
    revoke_form: BatchRevokeForm | None = None,
    notice: str = "",
) -> dict[str, Any]:
    rows = _rows(batch)
    same, varying_labels = _differences(rows)
    in_manifest = [row["proposal"] for row in rows if row["in_manifest"]]
    totals = [
        money(format(total, "f"), currency)
        for currency, total in sorted(totals_of([p.action for p in in_manifest]).items())
    ]
    waiting = [row for row in rows if row["open"]]
    why_not = ""
    if batch.revoked_at is not None:
        why_not = "this batch was revoked"
    elif not waiting:
        why_not = "every member was decided"
    else:
        clock = timezone.now()
        for row in waiting:
            proposal = row["proposal"]
            refusal = refusal_to_vote(
                proposal,
                user,
                proposal.action_digest,
                clock,
                slots=VoterSlots(proposal, user, role=role),
                batch_vote=True,
            )
            if refusal is not None:
                why_not = f"member {row['member'].position} ({proposal.request_id}): {refusal.message}"
                break
    waiting_ids = [row["proposal"].request_id for row in waiting]
    if form is None:
        form = BatchDecisionForm(
            initial={"manifest": batch.manifest_digest, "approve": waiting_ids}, waiting=waiting_ids
        )
    revocable = (
        batch.revoked_at is None
        and any(row["in_manifest"] and row["proposal"].state in RELEASED for row in rows)
        and may_revoke_batch(batch, user, role)
    )
    return {
        "batch": batch,
        "rows": rows,
        "same": same,
        "varying_labels": varying_labels,
        "totals": totals,
        "count_in": len(in_manifest),
        "count_waiting": len(waiting),
        "mode": "vote" if waiting and not why_not else "closed",
        "why_not": why_not,
        "partial": bool(batch.rule.get("partial")),
        "form": form,
        "revocable": revocable,
        "revoke_form": revoke_form or BatchRevokeForm(),
        "notice": notice,
        "history_days": HISTORY_DAYS,
    }


def page_hash(context: dict[str, Any]) -> str:
    """sha256 of the members' table as rendered: the audit records what the reviewer was shown."""
    html = render_to_string("approvals/batch.html#members", context)
    return "sha256:" + hashlib.sha256(html.encode()).hexdigest()


@require_GET
@verified_required
def batch_page(request: HttpRequest, batch_pk: Any) -> HttpResponse:
    batch, role = _batch_for_reviewer(request, batch_pk)
    return render(request, "approvals/batch.html", batch_context(batch, request.user, role))


@require_POST
@verified_required
def decide_batch(request: HttpRequest, batch_pk: Any) -> HttpResponse:
    batch, role = _batch_for_reviewer(request, batch_pk)
    waiting = list(
        batch.members.filter(
            standing=BatchMember.Standing.IN, proposal__state__in=OPEN_FOR_VOTES
        ).values_list("proposal__request_id", flat=True)
    )
    form = BatchDecisionForm(request.POST, waiting=waiting)
    if not form.is_valid():
        return render(
            request, "approvals/batch.html", batch_context(batch, request.user, role, form=form), status=400
        )
    data = form.cleaned_data
    # Only a subset needs the list: the whole batch is every member still waiting when the vote counts.
    approve = data["approve"] if data["action"] == "approve" and batch.rule.get("partial") else None
    if approve is not None and set(approve) == set(waiting):
        approve = None
    try:
        check_words(
            data["action"], reason=data["reason"]
        )  # the words before the factor: a code checked is spent
        step_up = stepup.step_up_for(
            request.user, data["otp_code"], request.session, proposal_id=batch.id, digest=data["manifest"]
        )
        result = cast_batch_vote(
            batch.id,
            request.user,
            verdict=data["action"],
            manifest_seen=data["manifest"],
            approve=approve,
            reason=data["reason"],
            step_up=step_up,
            page_hash=page_hash(batch_context(batch, request.user, role)),
        )
    except ServiceError as error:
        field = error.field if error.field in ("reason", "otp_code", "approve") else None
        form.add_error(field, error.message)
        context = batch_context(batch, request.user, role, form=form)
        return render(request, "approvals/batch.html", context, status=error.http_status)
    done = (
        "Your approval is recorded"
        if data["action"] == "approve"
        else "Your rejection is recorded; the agent will not act"
    )
    messages.success(request, f"{done} for {len(result.votes) - len(result.excluded)} members.")
    return redirect("approvals:batch", batch_pk=batch.id)


@require_POST
@verified_required
def revoke_batch_view(request: HttpRequest, batch_pk: Any) -> HttpResponse:
    batch, role = _batch_for_reviewer(request, batch_pk)
    form = BatchRevokeForm(request.POST)
    if form.is_valid():
        try:
            revoke_batch(batch.id, request.user, reason=form.cleaned_data["reason"])
        except ServiceError as error:
            form.add_error("reason" if error.field == "reason" else None, error.message)
        else:
            messages.success(request, "The batch is revoked: no member's decision can be used any more.")
            return redirect("approvals:batch", batch_pk=batch.id)
    context = batch_context(batch, request.user, role, revoke_form=form)
    return render(request, "approvals/batch.html", context, status=400)
