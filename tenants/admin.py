"""Tenants, their members and approver groups in the admin, written through approvals/services/tenants.py so
every change is checked and audited; forms ask the services' own checks first, so that a refusal shows on
its field."""

from typing import cast

from django import forms
from django.contrib import admin

from approvals.admin.common import PeopleScopedInline, ServiceInlineFormSet, TenantScopedAdmin, adopt_stored
from approvals.services.quotas import LIMIT_FIELDS, set_tenant_limits
from approvals.services.tenants import (
    add_group_member,
    create_group,
    create_tenant,
    group_member_refusal,
    membership_refusal,
    provider_kept_refusal,
    remove_group_member,
    remove_tenant_membership,
    set_tenant_membership,
    update_tenant,
)
from tenants.models import ApproverGroup, GroupMembership, Tenant, TenantMembership

# ---------------------------------------------------------------------------------------------------
# Tenants and their members


class TenantMembershipFormSet(ServiceInlineFormSet):
    def clean(self):
        super().clean()
        tenant = self.instance
        seen: dict[str, object] = {}
        for form in self.forms:
            data = getattr(form, "cleaned_data", None)
            if not data or data.get("DELETE") or not data.get("user"):
                continue
            principal_id = (data.get("principal_id") or "").strip()
            if principal_id:
                if principal_id in seen:  # rows of this one form: the service sees them one at a time
                    form.add_error("principal_id", "two members cannot share a principal id")
                seen[principal_id] = data["user"]
            if tenant.pk:
                refusal = membership_refusal(
                    tenant, data["user"], role=data.get("role"), principal_id=principal_id
                )
                if refusal is not None:
                    form.add_error(refusal.field, refusal.message)


class TenantMembershipInline(PeopleScopedInline):
    model = TenantMembership
    formset = TenantMembershipFormSet
    fields = ["user", "role", "principal_id"]
    autocomplete_fields = ["user"]  # by username or name, among the people she may see
    extra = 0


class TenantForm(forms.ModelForm):
    class Meta:
        model = Tenant
        fields = ["slug", "name", "default_ttl_seconds", "admin_group", *LIMIT_FIELDS]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "admin_group" in self.fields:
            admin_group = cast(forms.ModelChoiceField, self.fields["admin_group"])
            admin_group.queryset = ApproverGroup.objects.filter(tenant_id=self.instance.pk)
            self.fields[
                "admin_group"
            ].help_text = (
                "Who decides what no policy matches (the fail-closed default). A new tenant gets 'admins'."
            )


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin):
    tenant_path = "pk"
    form = TenantForm
    inlines = [TenantMembershipInline]
    list_display = ["slug", "name", "admin_group", "default_ttl_seconds"]
    search_fields = ["slug", "name"]

    def get_fields(self, request, obj=None):
        return (
            ["slug", "name", "default_ttl_seconds", "admin_group", *LIMIT_FIELDS]
            if obj
            else ["slug", "name", "default_ttl_seconds", *LIMIT_FIELDS]
        )

    def get_readonly_fields(self, request, obj=None):
        return ["slug"] if obj else []

    def get_inlines(self, request, obj):
        return self.inlines if obj else []

    def has_add_permission(self, request):
        return request.user.is_superuser

    def save_model(self, request, obj, form, change):
        limits = {name: form.cleaned_data.get(name) for name in LIMIT_FIELDS}
        if change:
            update_tenant(
                obj,
                actor=request.user,
                name=obj.name,
                default_ttl_seconds=obj.default_ttl_seconds,
                admin_group=obj.admin_group,
            )
        else:
            adopt_stored(
                obj,
                create_tenant(
                    slug=obj.slug,
                    name=obj.name,
                    actor=request.user,
                    default_ttl_seconds=obj.default_ttl_seconds,
                ),
            )
        adopt_stored(obj, set_tenant_limits(obj, actor=request.user, **limits))

    def save_formset(self, request, form, formset, change):
        if formset.model is not TenantMembership:
            return super().save_formset(request, form, formset, change)
        tenant = form.instance
        formset.save(commit=False)  # collects new, changed and deleted rows without writing them
        for membership in formset.deleted_objects:
            remove_tenant_membership(tenant, membership.user, actor=request.user)
        for membership in formset.new_objects + [row for row, _ in formset.changed_objects]:
            set_tenant_membership(
                tenant,
                membership.user,
                role=membership.role,
                principal_id=membership.principal_id,
                actor=request.user,
            )


# ---------------------------------------------------------------------------------------------------
# Approver groups


class GroupMembershipFormSet(ServiceInlineFormSet):
    def add_fields(self, form, index):
        super().add_fields(form, index)
        if form.instance.pk and form.instance.managed_by and "user" in form.fields:
            form.fields["user"].disabled = True  # the provider keeps it: shown, never edited here

    def clean(self):
        super().clean()
        tenant_id = self.instance.tenant_id
        kept = []
        for form in self.forms:
            data = getattr(form, "cleaned_data", None)
            if data and data.get("DELETE") and form.instance.pk:
                kept_refusal = provider_kept_refusal(form.instance)
                if kept_refusal is not None:
                    kept.append(kept_refusal.message)
            if not data or data.get("DELETE") or not data.get("user") or form.instance.pk:
                continue
            refusal = group_member_refusal(tenant_id, data["user"])
            if refusal is not None:
                form.add_error(refusal.field, refusal.message)
        if kept:
            # The formset's own error: Django ignores the errors of a row marked for deletion.
            raise forms.ValidationError(kept)


class GroupMembershipInline(PeopleScopedInline):
    model = GroupMembership
    formset = GroupMembershipFormSet
    fields = ["user", "managed_by", "added_at"]
    readonly_fields = ["managed_by", "added_at"]  # who keeps it: an admin, sign-in or SCIM
    autocomplete_fields = ["user"]  # by username or name, among the people she may see
    extra = 0


@admin.register(ApproverGroup)
class ApproverGroupAdmin(TenantScopedAdmin):
    inlines = [GroupMembershipInline]
    list_display = ["slug", "name", "tenant", "member_count"]
    list_filter = ["tenant"]
    search_fields = ["slug", "name"]
    fields = ["tenant", "slug", "name"]

    @admin.display(description="members")
    def member_count(self, group):
        return group.groupmembership_set.count()

    def get_readonly_fields(self, request, obj=None):
        return ["tenant", "slug", "name"] if obj else []

    def save_model(self, request, obj, form, change):
        if not change:
            adopt_stored(obj, create_group(obj.tenant, slug=obj.slug, name=obj.name, actor=request.user))

    def save_formset(self, request, form, formset, change):
        if formset.model is not GroupMembership:
            return super().save_formset(request, form, formset, change)
        group = form.instance
        formset.save(commit=False)
        for membership in formset.deleted_objects:
            remove_group_member(group, membership.user, actor=request.user)
        for membership in formset.new_objects:
            add_group_member(group, membership.user, actor=request.user)
