"""The standing grants pages: the list (every grant of the tenants where the person is an admin, and
"your grants": those they approved) with what was used and what is left, revocation in one step with a
reason, and the grant panel of the proposal page (the grant a request asks for, the grant that decided
a call, or the grants a call did not fit and why). Writes go through approvals/services/grants.py."""

from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import ObjectDoesNotExist
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from approvals.models import Grant, GrantMiss, GrantUse, Proposal, Vote
from approvals.policy.grants import amount_left
from approvals.policy.reserved import GRANT_TOOL
from approvals.services.grant_renewals import renew_grant
from approvals.services.grants import revoke_grant
from lib.decorators import verified_required
from lib.errors import ServiceError
from tenants.models import TenantMembership
from tenants.queries import tenant_ids_of

LIST_LIMIT = 200


class RevokeGrantForm(forms.Form):
    reason = forms.CharField(
        label="Why revoke it",
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
        error_messages={"required": "a revocation needs a reason"},
    )


def _row(
    grant: Grant, user_id: int | None, admin_tenants: set[int], approvers: dict[Any, set[int]]
) -> dict[str, Any]:
    left = amount_left(grant)
    return {
        "grant": grant,
        "uses_left": max(grant.max_uses - grant.uses, 0),
        "amounts": [
            {
                "currency": currency,
                "cap": cap,
                "spent": grant.spent.get(currency, "0"),
                "left": left[currency],
            }
            for currency, cap in sorted(grant.max_amount.items())
        ],
        "may_revoke": grant.state == Grant.State.ACTIVE
        and (grant.tenant_id in admin_tenants or user_id in approvers.get(grant.proposal_id, set())),
    }


def list_context(user: Any, forms_by_grant: dict[Any, RevokeGrantForm] | None = None) -> dict[str, Any]:
    """Grants this person approved ("yours"), and every grant of the tenants they administer."""
    admin_tenants = set(tenant_ids_of(user, {TenantMembership.Role.ADMIN}))
    mine_ids = set(
        Vote.objects.filter(voter=user, verdict=Vote.Verdict.APPROVE, proposal__tool=GRANT_TOOL).values_list(
            "proposal_id", flat=True
        )
    )
    grants = list(
        Grant.objects.filter(Q(tenant_id__in=admin_tenants) | Q(proposal_id__in=mine_ids))
        .select_related("agent", "tenant", "proposal")
        .order_by("-created_at")[:LIST_LIMIT]
    )
    approvers: dict[Any, set[int]] = {}
    for proposal_id, voter_id in Vote.objects.filter(
        proposal_id__in=[g.proposal_id for g in grants], verdict=Vote.Verdict.APPROVE
    ).values_list("proposal_id", "voter_id"):
        approvers.setdefault(proposal_id, set()).add(voter_id)
    rows = [_row(grant, user.pk, admin_tenants, approvers) for grant in grants]
    for row in rows:
        row["form"] = (forms_by_grant or {}).get(row["grant"].id) or RevokeGrantForm(
            auto_id=f"grant-{row['grant'].id}-%s"
        )
    return {
        "mine": [row for row in rows if row["grant"].proposal_id in mine_ids],
        "tenant_wide": [row for row in rows if row["grant"].tenant_id in admin_tenants],
        "is_admin": bool(admin_tenants),
        "nav": "grants",
    }


@require_GET
@verified_required
def grants(request: HttpRequest) -> HttpResponse:
    return render(request, "approvals/grants.html", list_context(request.user))


@require_POST
@verified_required
def revoke(request: HttpRequest, grant_id: Any) -> HttpResponse:
    """Revoke a grant in force, with a reason, in one step."""
    form = RevokeGrantForm(request.POST, auto_id=f"grant-{grant_id}-%s")
    status = 400
    if form.is_valid():
        try:
            revoke_grant(grant_id, request.user, reason=form.cleaned_data["reason"])
        except ServiceError as error:
            if error.http_status == 404:
                raise Http404("no such grant") from None
            form.add_error("reason" if error.field == "reason" else None, error.message)
            status = error.http_status
        else:
            messages.success(
                request, "The grant is revoked; decisions made under it and not used yet are revoked too."
            )
            return redirect("approvals:grants")
    context = list_context(request.user, {grant_id: form})
    return render(request, "approvals/grants.html", context, status=status)


@require_POST
@verified_required
def renew(request: HttpRequest, grant_id: Any) -> HttpResponse:
    """Ask for a grant's renewal: a new grant request with the same terms for the next window, which
    the other approvers vote on (the page of that request)."""
    try:
        renewal = renew_grant(grant_id, request.user)
    except ServiceError as error:
        if error.http_status == 404:
            raise Http404("no such grant") from None
        messages.error(request, error.message)
        return redirect("approvals:grants")
    messages.success(request, "The renewal is asked for: another approver decides it here.")
    return redirect("approvals:detail", proposal_id=renewal.proposal_id)


def proposal_panel(proposal: Proposal) -> dict[str, Any] | None:
    """What the proposal page shows about grants, in one query: the grant a request asks for; or, for a
    call that went to people (it has a follow-up, joined with the page's read of the proposal), the
    grants it did not fit and why; or else the grant that decided it. None: no grant concerns it."""
    if proposal.tool == GRANT_TOOL:
        grant = Grant.objects.filter(proposal=proposal).first()
        return None if grant is None else {"kind": "request", **_row(grant, None, set(), {})}
    try:
        went_to_people = proposal.follow_up is not None
    except ObjectDoesNotExist:
        went_to_people = False
    if went_to_people:
        misses = list(GrantMiss.objects.filter(proposal=proposal).order_by("id").values("grant_id", "reason"))
        return {"kind": "misses", "misses": misses} if misses else None
    use = GrantUse.objects.filter(proposal=proposal).select_related("grant").first()
    return None if use is None else {"kind": "use", "use": use}
