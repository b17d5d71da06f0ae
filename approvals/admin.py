"""The Django admin of the approval domain: configuration, written through the services.

Admins configure tenants, members, approver groups, agents, policies and halts here. Every write goes
through approvals/services/, so it is checked and audited like any other change; forms ask the services'
own checks first (membership_refusal, group_member_refusal, policy.version_field_errors) so that a
refusal shows on its field instead of as an error page. Proposals, votes, decisions and the outbox are
read-only: people decide in the reviewer pages, never here.

Policy versions are never edited. "New draft" writes a new version; a second admin (not the author)
approves and activates it, which retires the version it replaces. "Dry run" replays the tenant's last
100 proposals against a draft. Staff who are not superusers see only the tenants they administer.
"""

import json

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.forms.models import BaseInlineFormSet
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from approvals import break_glass, policy, services
from approvals.models import (
    Agent,
    ApproverGroup,
    BreakGlassRelease,
    Decision,
    GroupMembership,
    Halt,
    OutboxMessage,
    Policy,
    PolicyVersion,
    PostHocReview,
    Proposal,
    Tenant,
    TenantMembership,
    Vote,
    new_token,
)
from approvals.services.agents import delivery_for, refuse_shared_identity
from approvals.templatetags.agent_text import agent_text_html

DRY_RUN_SIZE = 100


def _adopt(obj, stored) -> None:
    """The admin built `obj` from the form but a service stored `stored`: point the admin's redirect, log
    entry and inline formsets at the stored row."""
    for field in stored._meta.concrete_fields:
        setattr(obj, field.attname, getattr(stored, field.attname))
    obj._state.adding = False
    obj._state.db = stored._state.db


def _group_slugs(tenant_id) -> set[str]:
    return set(ApproverGroup.objects.filter(tenant_id=tenant_id).values_list("slug", flat=True))


# ---------------------------------------------------------------------------------------------------
# Shared behaviour


class TenantScopedAdmin(admin.ModelAdmin):
    """Superusers see every tenant; other staff see only the tenants they are an admin of."""

    tenant_path = "tenant"

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        tenant_ids = services.admin_tenant_ids(request.user)
        return queryset if tenant_ids is None else self.limit_to_tenants(queryset, tenant_ids)

    def limit_to_tenants(self, queryset, tenant_ids):
        return queryset.filter(**{f"{self.tenant_path}__in": tenant_ids})

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        tenant_ids = services.admin_tenant_ids(request.user)
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
                refusal = services.membership_refusal(
                    tenant, data["user"], role=data.get("role"), principal_id=principal_id
                )
                if refusal is not None:
                    form.add_error(refusal.field, refusal.message)


class PeopleScopedInline(admin.TabularInline):
    """A tenant admin picks members only among the people she may see (typing another tenant's user id
    into the raw-id box is refused like an unknown id)."""

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "user":
            kwargs["queryset"] = people_visible_to(request.user, get_user_model().objects.all())
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class TenantMembershipInline(PeopleScopedInline):
    model = TenantMembership
    formset = TenantMembershipFormSet
    fields = ["user", "role", "principal_id"]
    raw_id_fields = ["user"]
    extra = 0


class TenantForm(forms.ModelForm):
    class Meta:
        model = Tenant
        fields = ["slug", "name", "default_ttl_seconds", "admin_group"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "admin_group" in self.fields:
            self.fields["admin_group"].queryset = ApproverGroup.objects.filter(tenant_id=self.instance.pk)
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
            ["slug", "name", "default_ttl_seconds", "admin_group"]
            if obj
            else ["slug", "name", "default_ttl_seconds"]
        )

    def get_readonly_fields(self, request, obj=None):
        return ["slug"] if obj else []

    def get_inlines(self, request, obj):
        return self.inlines if obj else []

    def has_add_permission(self, request):
        return request.user.is_superuser

    def save_model(self, request, obj, form, change):
        if change:
            services.update_tenant(
                obj,
                actor=request.user,
                name=obj.name,
                default_ttl_seconds=obj.default_ttl_seconds,
                admin_group=obj.admin_group,
            )
        else:
            _adopt(
                obj,
                services.create_tenant(
                    slug=obj.slug,
                    name=obj.name,
                    actor=request.user,
                    default_ttl_seconds=obj.default_ttl_seconds,
                ),
            )

    def save_formset(self, request, form, formset, change):
        if formset.model is not TenantMembership:
            return super().save_formset(request, form, formset, change)
        tenant = form.instance
        formset.save(commit=False)  # collects new, changed and deleted rows without writing them
        for membership in formset.deleted_objects:
            services.remove_tenant_membership(tenant, membership.user, actor=request.user)
        for membership in formset.new_objects + [row for row, _ in formset.changed_objects]:
            services.set_tenant_membership(
                tenant,
                membership.user,
                role=membership.role,
                principal_id=membership.principal_id,
                actor=request.user,
            )


# ---------------------------------------------------------------------------------------------------
# Approver groups


class GroupMembershipFormSet(ServiceInlineFormSet):
    def clean(self):
        super().clean()
        tenant_id = self.instance.tenant_id
        for form in self.forms:
            data = getattr(form, "cleaned_data", None)
            if not data or data.get("DELETE") or not data.get("user") or form.instance.pk:
                continue
            refusal = services.group_member_refusal(tenant_id, data["user"])
            if refusal is not None:
                form.add_error(refusal.field, refusal.message)


class GroupMembershipInline(PeopleScopedInline):
    model = GroupMembership
    formset = GroupMembershipFormSet
    fields = ["user", "added_at"]
    readonly_fields = ["added_at"]
    raw_id_fields = ["user"]
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
            _adopt(obj, services.create_group(obj.tenant, slug=obj.slug, name=obj.name, actor=request.user))

    def save_formset(self, request, form, formset, change):
        if formset.model is not GroupMembership:
            return super().save_formset(request, form, formset, change)
        group = form.instance
        formset.save(commit=False)
        for membership in formset.deleted_objects:
            services.remove_group_member(group, membership.user, actor=request.user)
        for membership in formset.new_objects:
            services.add_group_member(group, membership.user, actor=request.user)


# ---------------------------------------------------------------------------------------------------
# Agents


class AgentForm(forms.ModelForm):
    card_url = forms.URLField(
        assume_scheme="https",
        max_length=200,
        required=False,
        help_text="The agent card URL, e.g. https://agent.example/.well-known/agent-card.json. Leave it "
        "empty for an agent that is not an A2A server (a pull agent): Reviewer then never calls it, and "
        "it must have an audience of its own.",
    )
    outbound_auth_credentials = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="What Reviewer presents when it calls the agent. Never shown; leave empty to keep it.",
    )

    class Meta:
        model = Agent
        fields = [
            "tenant",
            "slug",
            "name",
            "card_url",
            "audience",
            "outbound_auth_scheme",
            "outbound_auth_credentials",
        ]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "audience" in self.fields:
            self.fields["audience"].required = False
            self.fields["audience"].help_text = (
                "The `aud` of its decisions; empty means the agent card URL. Like the card URL, it is this "
                "agent's own: no other agent, in any tenant, may have it."
            )

    def clean(self):
        cleaned = super().clean()
        card_url = cleaned.get("card_url") or ""
        audience = cleaned.get("audience") or card_url
        try:
            # Pull exactly without a card URL; the model's constraint checks the pair.
            self.instance.delivery = delivery_for(card_url, audience)
            refuse_shared_identity(card_url, audience, other_than=self.instance.pk)
        except services.ServiceError as refusal:
            self.add_error(refusal.field, refusal.message)
        return cleaned


def _show_tokens_once(request, agent: Agent, push_token: str, api_token: str) -> None:
    messages.warning(
        request,
        format_html(
            "Tokens for {}: push token <code>{}</code>, API token <code>{}</code>. They are shown this once "
            "(only their hashes are stored): give them to the agent now.",
            agent.slug,
            push_token,
            api_token,
        ),
    )


@admin.register(Agent)
class AgentAdmin(TenantScopedAdmin):
    form = AgentForm
    list_display = ["slug", "name", "tenant", "delivery", "card_url", "created_at"]
    list_filter = ["tenant"]
    search_fields = ["slug", "name", "card_url"]
    actions = ["rotate_tokens"]

    def get_readonly_fields(self, request, obj=None):
        return ["tenant", "slug", "created_at"] if obj else []

    def save_model(self, request, obj, form, change):
        if change:
            changes = {
                name: form.cleaned_data[name] for name in services.AGENT_EDITABLE if name in form.cleaned_data
            }
            if not changes.get("outbound_auth_credentials"):
                changes.pop("outbound_auth_credentials", None)
            changes["audience"] = changes.get("audience") or obj.card_url
            _adopt(obj, services.update_agent(Agent.objects.get(pk=obj.pk), actor=request.user, **changes))
            return
        push_token, api_token = new_token(), new_token()
        agent = services.register_agent(
            tenant=obj.tenant,
            slug=obj.slug,
            name=obj.name,
            card_url=obj.card_url,
            audience=obj.audience,
            push_token=push_token,
            api_token=api_token,
            outbound_auth_scheme=obj.outbound_auth_scheme,
            outbound_auth_credentials=form.cleaned_data.get("outbound_auth_credentials", ""),
            actor=request.user,
        )
        _adopt(obj, agent)
        _show_tokens_once(request, agent, push_token, api_token)

    @admin.action(description="Rotate tokens (the old ones stop working now)")
    def rotate_tokens(self, request, queryset):
        for agent in queryset:
            try:
                push_token, api_token = services.rotate_agent_tokens(agent, actor=request.user)
            except services.ServiceError as error:
                messages.error(request, f"{agent.slug}: {error.message}")
                continue
            _show_tokens_once(request, agent, push_token, api_token)


# ---------------------------------------------------------------------------------------------------
# Policies and their versions


class PolicyVersionInline(admin.TabularInline):
    model = PolicyVersion
    fields = [
        "version",
        "status",
        "outcome",
        "agent_pattern",
        "tool_pattern",
        "condition",
        "thresholds",
        "break_glass",
        "author",
        "activated_by",
        "activated_at",
    ]
    readonly_fields = fields
    show_change_link = True
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Policy)
class PolicyAdmin(TenantScopedAdmin):
    list_display = ["slug", "name", "tenant", "active", "drafts"]
    list_filter = ["tenant"]
    search_fields = ["slug", "name"]
    fields = ["tenant", "slug", "name"]
    inlines = [PolicyVersionInline]

    @admin.display(description="active version")
    def active(self, obj):
        version = obj.active_version
        return version.version if version else "none"

    @admin.display(description="drafts")
    def drafts(self, obj):
        return obj.versions.filter(status=PolicyVersion.Status.DRAFT).count()

    def get_readonly_fields(self, request, obj=None):
        return ["tenant", "slug", "name"] if obj else []

    def save_model(self, request, obj, form, change):
        if not change:
            _adopt(obj, services.create_policy(obj.tenant, slug=obj.slug, name=obj.name, actor=request.user))

    def response_add(self, request, obj, post_url_continue=None):
        messages.info(request, "Now write its first version: a draft, which another admin activates.")
        return HttpResponseRedirect(reverse("admin:approvals_policyversion_add") + f"?policy={obj.pk}")


class PolicyVersionForm(forms.ModelForm):
    """A new draft. The condition is compiled here so the compiler's message shows on the field; the
    thresholds must name this tenant's groups. The service checks all of it again when storing."""

    user = None  # the admin sets it: whoever writes the draft must administer the policy's tenant

    class Meta:
        model = PolicyVersion
        fields = ["policy", *policy.VERSION_FIELDS]
        widgets = {
            "condition": forms.Textarea(
                attrs={
                    "rows": 4,
                    "cols": 90,
                    "spellcheck": "false",
                    "placeholder": "e.g. double(args.amount) > 500.0",
                }
            ),
        }
        help_texts = {
            "thresholds": 'All must be met: [{"group": "finance", "count": 1}, {"group": "ops", "count": 2}]',
            "step_up": '"per_vote" (a fresh code or passkey on every vote), "passkey" (a passkey on every '
            "vote, no code) or a freshness window in seconds, e.g. 300",
            "break_glass": "{} for none, or named people who may release alone in an emergency: "
            + break_glass.EXAMPLE,
        }

    def clean(self):
        cleaned = super().clean()
        chosen = cleaned.get("policy")
        if (
            chosen is not None
            and self.user is not None
            and not services.is_config_admin(self.user, chosen.tenant_id)
        ):
            self.add_error("policy", "you are not an admin of this policy's tenant")
        values = {name: cleaned[name] for name in policy.VERSION_FIELDS if name in cleaned}
        if values.get("thresholds") is None:
            values["thresholds"] = []
        groups = _group_slugs(chosen.tenant_id) if chosen is not None else set()
        if values.get("break_glass") is None:
            values["break_glass"] = {}
        people = services.break_glass_people(chosen.tenant_id) if chosen is not None else None
        errors = policy.version_field_errors({**services.POLICY_VERSION_DEFAULTS, **values}, groups, people)
        if chosen is None:
            errors.pop("thresholds", None)  # cannot tell which groups exist before the policy is known
        for name, message in errors.items():
            if name in values or name == "__all__":
                self.add_error(None if name == "__all__" else name, message)
        return cleaned

    def version_fields(self) -> dict:
        values = {name: self.cleaned_data[name] for name in policy.VERSION_FIELDS}
        values["thresholds"] = values["thresholds"] or []
        values["break_glass"] = values["break_glass"] or {}
        return values


@admin.register(PolicyVersion)
class PolicyVersionAdmin(TenantScopedAdmin):
    tenant_path = "policy__tenant"
    form = PolicyVersionForm
    list_display = [
        "__str__",
        "status",
        "outcome",
        "agent_pattern",
        "tool_pattern",
        "author",
        "activated_by",
        "created_at",
    ]
    list_filter = ["status", "outcome", "policy__tenant"]
    list_select_related = ["policy__tenant", "author", "activated_by"]
    search_fields = ["policy__slug", "tool_pattern", "condition"]
    actions = ["approve_and_activate"]
    readonly_after_creation = [
        "policy",
        "version",
        "status",
        *policy.VERSION_FIELDS,
        "author",
        "created_at",
        "activated_by",
        "activated_at",
    ]

    # Versions are immutable: the change page is a read-only view with activate / dry run / new draft.
    def has_change_permission(self, request, obj=None):
        return False

    def has_activate_permission(self, request):
        return request.user.is_active and request.user.is_staff

    def get_fields(self, request, obj=None):
        return self.readonly_after_creation if obj else ["policy", *policy.VERSION_FIELDS]

    def get_form(self, request, obj=None, **kwargs):
        form_class = super().get_form(request, obj, **kwargs)
        return type(form_class.__name__, (form_class,), {"user": request.user})

    def get_changeform_initial_data(self, request):
        """A new draft starts as a copy of the version it edits (?from=<id>) or the policy's newest."""
        initial = super().get_changeform_initial_data(request)
        source = None
        if request.GET.get("from", "").isdigit():
            source = self.get_queryset(request).filter(pk=request.GET["from"]).first()
        elif request.GET.get("policy", "").isdigit():
            newest = self.get_queryset(request).filter(policy_id=request.GET["policy"]).order_by("-version")
            source = newest.first()
        if source is not None:
            initial.update({name: getattr(source, name) for name in policy.VERSION_FIELDS})
            initial["policy"] = source.policy_id
        return initial

    def save_model(self, request, obj, form, change):
        if change:
            raise PermissionDenied("policy versions are immutable")
        _adopt(
            obj,
            services.create_policy_version(
                form.cleaned_data["policy"], form.version_fields(), actor=request.user
            ),
        )

    def response_add(self, request, obj, post_url_continue=None):
        messages.info(request, f"Draft {obj} saved. Another admin must approve and activate it.")
        return HttpResponseRedirect(reverse("admin:approvals_policyversion_change", args=[obj.pk]))

    def add_view(self, request, form_url="", extra_context=None):
        if request.method == "POST" and "_dryrun" in request.POST:
            form = self.get_form(request)(request.POST)
            if form.is_valid():
                draft = form.save(commit=False)
                draft.version = (
                    draft.policy.versions.order_by("-version").values_list("version", flat=True).first() or 0
                ) + 1
                return self._render_dry_run(request, draft, unsaved=True)
            # Invalid: the normal add view validates again and shows the errors on the fields.
        return super().add_view(request, form_url, extra_context)

    def get_urls(self):
        own = [
            path(
                "<int:version_id>/activate/",
                self.admin_site.admin_view(self.activate_view),
                name="approvals_policyversion_activate",
            ),
            path(
                "<int:version_id>/dry-run/",
                self.admin_site.admin_view(self.dry_run_view),
                name="approvals_policyversion_dry_run",
            ),
        ]
        return own + super().get_urls()

    def _activate(self, request, version: PolicyVersion) -> bool:
        try:
            services.activate_policy_version(version, actor=request.user)
        except services.ServiceError as error:
            messages.error(request, f"{version}: {error.message}")
            return False
        messages.success(request, f"{version} is now active; the version it replaces is retired.")
        return True

    @admin.action(
        description="Approve and activate (by a second admin, not the author)", permissions=["activate"]
    )
    def approve_and_activate(self, request, queryset):
        for version in queryset.select_related("policy"):
            self._activate(request, version)

    def activate_view(self, request, version_id):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_activate_permission(request):
            raise PermissionDenied
        version = get_object_or_404(self.get_queryset(request), pk=version_id)
        self._activate(request, version)
        return HttpResponseRedirect(reverse("admin:approvals_policyversion_change", args=[version.pk]))

    def dry_run_view(self, request, version_id):
        versions = self.get_queryset(request).select_related("policy__tenant")
        version = get_object_or_404(versions, pk=version_id)
        if not self.has_view_permission(request, version):
            raise PermissionDenied
        return self._render_dry_run(request, version, unsaved=False)

    def _render_dry_run(self, request, draft: PolicyVersion, *, unsaved: bool):
        rows = policy.dry_run(draft, policy.recent_proposals(draft.policy.tenant, DRY_RUN_SIZE))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Dry run of {draft}",
            "draft": draft,
            "unsaved": unsaved,
            "rows": rows,
            "matched": sum(1 for row in rows if row.draft_matches),
            "changed": sum(1 for row in rows if row.changes),
            "size": DRY_RUN_SIZE,
        }
        return TemplateResponse(request, "admin/approvals/policyversion/dry_run.html", context)


# ---------------------------------------------------------------------------------------------------
# Halts


class HaltForm(forms.ModelForm):
    user = None

    class Meta:
        model = Halt
        fields = ["scope", "tenant", "agent", "reason"]

    def clean(self):
        cleaned = super().clean()
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

    def get_form(self, request, obj=None, **kwargs):
        form_class = super().get_form(request, obj, **kwargs)
        return type(form_class.__name__, (form_class,), {"user": request.user})

    def save_model(self, request, obj, form, change):
        _adopt(
            obj,
            services.halt(
                scope=obj.scope, actor=request.user, reason=obj.reason, tenant=obj.tenant, agent=obj.agent
            ),
        )

    @admin.action(description="Resume (lift these halts)", permissions=["resume"])
    def resume(self, request, queryset):
        lifted = 0
        for item in queryset.filter(lifted_at__isnull=True):
            if item.scope != Halt.Scope.GLOBAL and not services.is_config_admin(
                request.user, item.tenant_id or item.agent.tenant_id
            ):
                messages.error(request, f"{item}: only an admin of its tenant can lift it")
                continue
            if item.scope == Halt.Scope.GLOBAL and not request.user.is_superuser:
                messages.error(request, f"{item}: only a superuser lifts a global halt")
                continue
            lifted += services.resume(
                actor=request.user,
                reason="resumed from the admin",
                tenant=item.tenant if item.scope == Halt.Scope.TENANT else None,
                agent=item.agent if item.scope == Halt.Scope.AGENT else None,
                everything=item.scope == Halt.Scope.GLOBAL,
            )
        messages.success(request, f"{lifted} halt(s) lifted.")


# ---------------------------------------------------------------------------------------------------
# Read-only: what the services wrote


@admin.register(OutboxMessage)
class OutboxMessageAdmin(ReadOnlyAdmin):
    tenant_path = "proposal__tenant"
    list_display = ["id", "kind", "status", "agent", "proposal", "attempts", "next_attempt_at", "error"]
    list_filter = ["status", "kind"]
    list_select_related = ["agent", "proposal"]
    search_fields = ["message_id", "last_error"]
    ordering = ["-created_at"]

    @admin.display(description="last error")
    def error(self, message):
        # May quote an agent's refusal: agent text.
        return agent_text_html(
            (message.last_error[:120] + "…") if len(message.last_error) > 120 else message.last_error
        )


class VoteInline(admin.TabularInline):
    model = Vote
    fields = ["voter", "verdict", "group", "reason", "auth_method", "auth_at", "digest_seen", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


# The agent's plain-text fields of a proposal, shown through agent_text_html in lists and forms alike.
AGENT_TEXT_FIELDS = [
    "summary",
    "tool",
    "principal_id",
    "principal_display",
    "agent_version",
    "task_id",
    "context_id",
    "request_id",
    "transaction_id",
    "outcome_detail",
    "action",
    "consequences",
    "diff",
    "evidence",
]


def _agent_text_column(name: str):
    def column(self, proposal):
        value = getattr(proposal, name)
        if not isinstance(value, str):  # a JSON field: shown as JSON text, its strings as agent text
            value = json.dumps(value, ensure_ascii=False, indent=1)
        return agent_text_html(value)

    column.short_description = name.replace("_", " ")
    column.__name__ = f"shown_{name}"
    return column


@admin.register(Proposal)
class ProposalAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "shown_tool",
        "shown_summary",
        "state",
        "tenant",
        "agent",
        "risk",
        "expires_at",
    ]
    list_filter = ["state", "risk", "tenant"]
    list_select_related = ["tenant", "agent"]
    search_fields = ["summary", "tool", "request_id", "task_id", "principal_id"]
    date_hierarchy = "created_at"
    inlines = [VoteInline]
    # Agent text is isolated and its hidden characters badged (issue 9.4): the raw fields are replaced by
    # their shown_* forms.
    exclude = ["action_canonical", *AGENT_TEXT_FIELDS]
    readonly_fields = [f"shown_{name}" for name in AGENT_TEXT_FIELDS]


for _name in AGENT_TEXT_FIELDS:
    setattr(ProposalAdmin, f"shown_{_name}", _agent_text_column(_name))


@admin.register(Vote)
class VoteAdmin(ReadOnlyAdmin):
    tenant_path = "proposal__tenant"
    list_display = ["proposal", "voter", "verdict", "group", "auth_method", "created_at"]
    list_filter = ["verdict"]
    list_select_related = ["proposal", "voter", "group"]


@admin.register(BreakGlassRelease)
class BreakGlassReleaseAdmin(ReadOnlyAdmin):
    list_display = ["proposal", "releaser", "amount", "currency", "created_at", "reviews_due_at"]
    list_select_related = ["proposal", "releaser"]


@admin.register(PostHocReview)
class PostHocReviewAdmin(ReadOnlyAdmin):
    """Post-hoc reviews of break-glass releases; the overdue ones are also on /break-glass/."""

    list_display = ["release", "reviewer", "due_at", "verdict", "done_at", "overdue_noted_at"]
    list_filter = ["verdict", ("done_at", admin.EmptyFieldListFilter)]
    list_select_related = ["release", "reviewer"]


@admin.register(Decision)
class DecisionAdmin(ReadOnlyAdmin):
    tenant_path = "proposal__tenant"
    list_display = ["jti", "proposal", "kind", "issued_at", "expires_at", "consumed_at", "revoked_at"]
    list_filter = ["kind"]
    list_select_related = ["proposal"]
    # The token itself stays out of the admin: whoever holds it could replay it to the agent.
    exclude = ["token"]


# ---------------------------------------------------------------------------------------------------
# People. A superuser manages every account. A tenant admin (staff, not superuser) sees only the people
# who share a tenant she administers, never a superuser, and may change only their names and e-mail and
# reset their authenticator: flags, permissions, groups and passwords are the superuser's alone, so a
# tenant admin cannot raise herself or anyone else. Every change is recorded in the person's tenants'
# chains (services.record_person_changed; the device reset by services.reset_devices).


def people_visible_to(user, queryset):
    """The accounts this admin may see: all for a superuser; else those sharing a tenant she
    administers, superusers excepted."""
    tenant_ids = services.admin_tenant_ids(user)
    if tenant_ids is None:
        return queryset
    return queryset.filter(tenant_memberships__tenant_id__in=tenant_ids, is_superuser=False).distinct()


@admin.action(description="Reset one-time-code devices (they enroll again at next sign-in)")
def reset_otp_devices(modeladmin, request, queryset):
    for user in queryset:
        try:
            removed = services.reset_devices(user, actor=request.user, reason="reset in the admin")
        except services.ServiceError as error:
            modeladmin.message_user(request, f"{user}: {error.message}", level=messages.ERROR)
        else:
            modeladmin.message_user(request, f"{user}: {removed} device(s) removed")


# What a tenant admin may change on a person's page.
TENANT_ADMIN_PERSON_FIELDS = ("first_name", "last_name", "email")


class ReviewerUserAdmin(UserAdmin):
    actions = [reset_otp_devices]

    def get_queryset(self, request):
        return people_visible_to(request.user, super().get_queryset(request))

    def has_add_permission(self, request):
        # A new account starts with a password: the superuser's act (or manage.py / the setup command).
        return request.user.is_superuser and super().has_add_permission(request)

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser and super().has_delete_permission(request, obj)

    def get_fieldsets(self, request, obj=None):
        if request.user.is_superuser or obj is None:
            return super().get_fieldsets(request, obj)
        return (
            (None, {"fields": ("username",)}),
            ("Personal info", {"fields": TENANT_ADMIN_PERSON_FIELDS}),
            ("Status", {"fields": ("is_active", "is_staff", "is_superuser", "last_login", "date_joined")}),
        )

    def get_readonly_fields(self, request, obj=None):
        if request.user.is_superuser:
            return super().get_readonly_fields(request, obj)
        return ("username", "is_active", "is_staff", "is_superuser", "last_login", "date_joined")

    def user_change_password(self, request, id, form_url=""):
        if not request.user.is_superuser:
            raise PermissionDenied("only a superuser sets another person's password")
        response = super().user_change_password(request, id, form_url)
        if request.method == "POST" and response.status_code == 302:
            person = self.get_object(request, id)
            services.record_person_changed(person, actor=request.user, changed=["password"])
        return response

    def save_model(self, request, obj, form, change):
        before = services.person_values(self.model.objects.get(pk=obj.pk)) if change else {}
        super().save_model(request, obj, form, change)
        changed = list(form.changed_data) if change else ["created"]
        services.record_person_changed(obj, actor=request.user, changed=changed, before=before)


admin.site.unregister(get_user_model())
admin.site.register(get_user_model(), ReviewerUserAdmin)
