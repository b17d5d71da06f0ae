"""Out of office: the page where a person lends their eligibility to a delegate for a period, sees their
delegations and ends one early; tenant admins also see every active delegation in their tenants."""

from typing import cast

from django import forms
from django.contrib.auth import get_user_model
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from approvals.models.notifications import Delegation
from approvals.selectors.standins import current_delegations
from approvals.services.delegations import end_delegation, set_delegation
from lib.decorators import verified_required
from lib.errors import ServiceError
from tenants.models import Tenant, TenantMembership
from tenants.queries import tenant_ids_of


class DelegationForm(forms.Form):
    tenant: "forms.ModelChoiceField[Tenant]" = forms.ModelChoiceField(queryset=None, empty_label=None)
    delegate = forms.CharField(label="Delegate (their username)", max_length=150)
    starts_at = forms.DateTimeField(
        label="From (UTC)", widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    ends_at = forms.DateTimeField(
        label="Until (UTC)", widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    note = forms.CharField(label="Note (optional)", max_length=200, required=False)

    def __init__(self, user, *args, **kwargs):
        super().__init__(*args, **kwargs)
        tenant_field = cast(forms.ModelChoiceField, self.fields["tenant"])
        tenant_field.queryset = Tenant.objects.filter(memberships__user=user).order_by("name")

    def clean_delegate(self):
        # None for a name nobody has: set_delegation refuses it as it refuses a person of another
        # tenant, so the form tells no other tenant's usernames apart from names nobody has.
        return get_user_model().objects.filter(username=self.cleaned_data["delegate"].strip()).first()


def _context(user, form) -> dict:
    admin_of = tenant_ids_of(user, {TenantMembership.Role.ADMIN})
    mine = (
        Delegation.objects.filter(delegator=user).select_related("delegate", "tenant").order_by("-starts_at")
    )
    return {
        "form": form,
        "mine": list(mine[:20]),
        "for_me": [d for d in current_delegations(tenant_ids_of(user)) if d.delegate_id == user.pk],
        "tenant_active": current_delegations(admin_of),
        "is_admin": bool(admin_of),
        "nav": "out_of_office",
    }


@verified_required
@require_http_methods(["GET", "POST"])
def out_of_office(request):
    form = DelegationForm(request.user, request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            set_delegation(
                actor=request.user,
                tenant=data["tenant"],
                delegate=data["delegate"],
                starts_at=data["starts_at"],
                ends_at=data["ends_at"],
                note=data["note"],
            )
            return redirect("approvals:out_of_office")
        except ServiceError as refusal:
            form.add_error(refusal.field if refusal.field in form.fields else None, refusal.message)
    return render(request, "approvals/out_of_office.html", _context(request.user, form))


@verified_required
@require_POST
def end(request, delegation_id: int):
    try:
        end_delegation(delegation_id, actor=request.user)
    except ServiceError:
        pass  # ended meanwhile, or not theirs: the page shows the current state either way
    return redirect("approvals:out_of_office")
