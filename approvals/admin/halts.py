"""The kill switch in the admin: halting a tenant, an agent or everything, and resuming."""

from django import forms
from django.contrib import admin, messages
from django.db.models import Q

from approvals.admin.common import TenantScopedAdmin, adopt_stored
from approvals.models import Halt
from approvals.services import halts
from approvals.services.halts import halt
from approvals.services.tenants import is_config_admin

# ---------------------------------------------------------------------------------------------------
# Halts


class HaltForm(forms.ModelForm):
    user = None

    class Meta:
        model = Halt
        fields = ["scope", "tenant", "agent", "reason"]

    def clean(self):
        super().clean()
        cleaned = self.cleaned_data
        scope, tenant, agent = cleaned.get("scope"), cleaned.get("tenant"), cleaned.get("agent")
        if scope == Halt.Scope.TENANT and (tenant is None or agent is not None):
            self.add_error("tenant", "a tenant halt names a tenant (and no agent)")
        if scope == Halt.Scope.AGENT and (agent is None or tenant is not None):
            self.add_error("agent", "an agent halt names an agent (and no tenant)")
        if scope == Halt.Scope.GLOBAL:
            if tenant is not None or agent is not None:
                self.add_error("scope", "a global halt names neither a tenant nor an agent")
            if self.user is not None and not self.user.is_superuser:
                self.add_error("scope", "only a superuser halts everything")
        return cleaned


@admin.register(Halt)
class HaltAdmin(TenantScopedAdmin):
    form = HaltForm
    list_display = ["__str__", "scope", "reason", "operator", "created_at", "lifted_at", "lifted_by"]
    list_filter = ["scope", ("lifted_at", admin.EmptyFieldListFilter)]
    list_select_related = ["tenant", "agent"]
    actions = ["resume"]

    def limit_to_tenants(self, queryset, tenant_ids):
        # Global halts belong to no tenant: only superusers see them.
        return queryset.filter(Q(tenant__in=tenant_ids) | Q(agent__tenant__in=tenant_ids))

    def get_fields(self, request, obj=None):
        if obj:
            return ["scope", "tenant", "agent", "reason", "operator", "created_at", "lifted_at", "lifted_by"]
        return ["scope", "tenant", "agent", "reason"]

    def has_change_permission(self, request, obj=None):
        return False  # a halt is lifted with the resume action, never edited

    def has_resume_permission(self, request):
        return request.user.is_active and request.user.is_staff

    def get_form(self, request, obj=None, change=False, **kwargs):
        form_class = super().get_form(request, obj, change, **kwargs)
        return type(form_class.__name__, (form_class,), {"user": request.user})

    def save_model(self, request, obj, form, change):
        adopt_stored(
            obj,
            halt(scope=obj.scope, actor=request.user, reason=obj.reason, tenant=obj.tenant, agent=obj.agent),
        )

    @admin.action(description="Resume (lift these halts)", permissions=["resume"])
    def resume(self, request, queryset):
        lifted = 0
        for item in queryset.filter(lifted_at__isnull=True):
            if item.scope != Halt.Scope.GLOBAL and not is_config_admin(
                request.user, item.tenant_id or item.agent.tenant_id
            ):
                messages.error(request, f"{item}: only an admin of its tenant can lift it")
                continue
            if item.scope == Halt.Scope.GLOBAL and not request.user.is_superuser:
                messages.error(request, f"{item}: only a superuser lifts a global halt")
                continue
            lifted += halts.resume(
                actor=request.user,
                reason="resumed from the admin",
                tenant=item.tenant if item.scope == Halt.Scope.TENANT else None,
                agent=item.agent if item.scope == Halt.Scope.AGENT else None,
                everything=item.scope == Halt.Scope.GLOBAL,
            )
        messages.success(request, f"{lifted} halt(s) lifted.")
