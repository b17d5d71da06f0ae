"""What every admin of the approval domain shares: tenant scoping, read-only admins, inline formsets whose
rows the services write."""

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.forms.models import BaseInlineFormSet

from approvals.models import Agent, Policy
from tenants.models import ApproverGroup, Tenant
from tenants.queries import admin_tenant_ids, people_visible_to


def adopt_stored(obj, stored) -> None:
    """The admin built `obj` from the form but a service stored `stored`: point the admin's redirect, log
    entry and inline formsets at the stored row (its primary key, every field as stored)."""
    obj.pk = stored.pk
    obj.refresh_from_db()


def tenant_group_slugs(tenant_id) -> set[str]:
    return set(ApproverGroup.objects.filter(tenant_id=tenant_id).values_list("slug", flat=True))


# ---------------------------------------------------------------------------------------------------
# Shared behaviour


class TenantScopedAdmin(admin.ModelAdmin):
    """Superusers see every tenant; other staff see only the tenants they are an admin of."""

    tenant_path = "tenant"

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        tenant_ids = admin_tenant_ids(request.user)
        return queryset if tenant_ids is None else self.limit_to_tenants(queryset, tenant_ids)

    def limit_to_tenants(self, queryset, tenant_ids):
        return queryset.filter(**{f"{self.tenant_path}__in": tenant_ids})

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        tenant_ids = admin_tenant_ids(request.user)
        if tenant_ids is not None:
            related = db_field.related_model
            if related is Tenant:
                kwargs["queryset"] = Tenant.objects.filter(pk__in=tenant_ids)
            elif related in (Agent, ApproverGroup, Policy):
                kwargs["queryset"] = related.objects.filter(tenant__in=tenant_ids)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def has_delete_permission(self, request, obj=None):
        return False  # domain rows are never deleted here: the audit trail refers to them


class ReadOnlyAdmin(TenantScopedAdmin):
    """Rows written only by the services (votes, decisions, deliveries): look, never touch."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class ServiceInlineFormSet(BaseInlineFormSet):
    """Rows of an inline are created and deleted through services; an existing row is never re-pointed at
    another user (that would rewrite history: delete it and add a new one)."""

    def clean(self):
        super().clean()
        for form in self.forms:
            if form.instance.pk and "user" in form.changed_data:
                form.add_error("user", "to replace someone, delete this row and add a new one")


class PeopleScopedInline(admin.TabularInline):
    """A tenant admin picks members only among the people she may see (typing another tenant's user id
    into the raw-id box is refused like an unknown id)."""

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "user":
            kwargs["queryset"] = people_visible_to(request.user, get_user_model().objects.all())
        return super().formfield_for_foreignkey(db_field, request, **kwargs)
