"""Policies and their versions in the admin. Policy versions are never edited: "New draft" writes a new
version; a second admin (not the author) approves and activates it, which retires the version it replaces.
"Dry run" replays the tenant's last 100 proposals against a draft. Forms ask the services' own checks
first (policy/validation.py `version_field_errors`), so a refusal shows on its field."""

import secrets

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse

from accounts.stepup import verify_code
from approvals.admin.common import TenantScopedAdmin, adopt_stored, tenant_group_slugs
from approvals.models import (
    Policy,
    PolicyVersion,
)
from approvals.policy import batching, break_glass
from approvals.policy.dry_run import dry_run, recent_proposals
from approvals.policy.validation import VERSION_FIELDS, version_field_errors
from approvals.services.policies import (
    POLICY_VERSION_DEFAULTS,
    activate_policy_version,
    break_glass_people,
    create_policy,
    create_policy_version,
)
from approvals.services.tenants import is_config_admin
from lib.errors import ServiceError

DRY_RUN_SIZE = 100


# ---------------------------------------------------------------------------------------------------
# Policies and their versions


# The session key of the unsaved draft a dry run shows, for its way back to the form.
UNSAVED_DRAFT = "policyversion_unsaved_draft"


class PolicyVersionInline(admin.TabularInline):
    model = PolicyVersion
    fields = readonly_fields = (
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
    )
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
            adopt_stored(obj, create_policy(obj.tenant, slug=obj.slug, name=obj.name, actor=request.user))

    def response_add(self, request, obj, post_url_continue=None):
        messages.info(request, "Now write its first version: a draft, which another admin activates.")
        return HttpResponseRedirect(reverse("admin:approvals_policyversion_add") + f"?policy={obj.pk}")


class PolicyVersionForm(forms.ModelForm):
    """A new draft. The condition is compiled here so the compiler's message shows on the field; the
    thresholds must name this tenant's groups. The service checks all of it again when storing."""

    user = None  # the admin sets it: whoever writes the draft must administer the policy's tenant

    class Meta:
        model = PolicyVersion
        fields = ["policy", *VERSION_FIELDS]
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
            "notifications": '{} for none, or e.g. {"reminders": [50, 80], "escalation": '
            '{"before_expiry_seconds": 900, "group": "finance-leads"}, "at_expiry": '
            '"expire_closed_tell_admins", "chat_decisions": true} (docs/notifications.md)',
            "batch": "{} for never batched, or e.g. " + batching.EXAMPLE + " (docs/policy-format.md)",
        }

    def clean(self):
        super().clean()
        cleaned = self.cleaned_data
        chosen = cleaned.get("policy")
        if chosen is not None and self.user is not None and not is_config_admin(self.user, chosen.tenant_id):
            self.add_error("policy", "you are not an admin of this policy's tenant")
        values = {name: cleaned[name] for name in VERSION_FIELDS if name in cleaned}
        if values.get("thresholds") is None:
            values["thresholds"] = []
        groups = tenant_group_slugs(chosen.tenant_id) if chosen is not None else set()
        if values.get("break_glass") is None:
            values["break_glass"] = {}
        if values.get("equivalent_tools") is None:
            values["equivalent_tools"] = []
        if values.get("notifications") is None:
            values["notifications"] = {}
        if values.get("batch") is None:
            values["batch"] = {}
        people = break_glass_people(chosen.tenant_id) if chosen is not None else None
        errors = version_field_errors({**POLICY_VERSION_DEFAULTS, **values}, groups, people)
        if chosen is None:
            errors.pop("thresholds", None)  # cannot tell which groups exist before the policy is known
        for name, message in errors.items():
            if name in values or name == "__all__":
                self.add_error(None if name == "__all__" else name, message)
        return cleaned

    def version_fields(self) -> dict:
        values = {name: self.cleaned_data[name] for name in VERSION_FIELDS}
        values["thresholds"] = values["thresholds"] or []
        values["break_glass"] = values["break_glass"] or {}
        values["equivalent_tools"] = values["equivalent_tools"] or []
        values["notifications"] = values["notifications"] or {}
        values["batch"] = values["batch"] or {}
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
    readonly_after_creation = [
        "policy",
        "version",
        "status",
        *VERSION_FIELDS,
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
        return self.readonly_after_creation if obj else ["policy", *VERSION_FIELDS]

    def get_form(self, request, obj=None, change=False, **kwargs):
        form_class = super().get_form(request, obj, change, **kwargs)
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
            initial.update({name: getattr(source, name) for name in VERSION_FIELDS})
            initial["policy"] = source.policy_id
        unsaved = request.session.get(UNSAVED_DRAFT) or {}
        if request.GET.get("draft") and request.GET["draft"] == unsaved.get("token"):
            initial.update(unsaved["fields"])  # back from a dry run: the fields as they were typed
            initial["policy"] = unsaved["policy"]
        return initial

    def save_model(self, request, obj, form, change):
        if change:
            raise PermissionDenied("policy versions are immutable")
        adopt_stored(
            obj,
            create_policy_version(form.cleaned_data["policy"], form.version_fields(), actor=request.user),
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
                # The way back to the form keeps what was typed: the fields wait in the session.
                token = secrets.token_urlsafe(8)
                fields = {name: form.cleaned_data[name] for name in VERSION_FIELDS}
                request.session[UNSAVED_DRAFT] = {"token": token, "policy": draft.policy_id, "fields": fields}
                back = reverse("admin:approvals_policyversion_add") + f"?draft={token}"
                return self._render_dry_run(request, draft, unsaved=True, back_url=back)
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

    def activate_view(self, request, version_id):
        """Approve and activate one draft, with the approving admin's fresh one-time code (or backup code),
        as `manage.py policy activate --code` and every vote ask: a session alone (a phished password
        plus one code at sign-in) does not change what every later proposal is decided by. There is no
        bulk action: each activation carries its own code."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_activate_permission(request):
            raise PermissionDenied
        version = get_object_or_404(self.get_queryset(request), pk=version_id)
        back = HttpResponseRedirect(reverse("admin:approvals_policyversion_change", args=[version.pk]))
        if verify_code(request.user, request.POST.get("otp_token", "")) is None:
            messages.error(
                request,
                f"{version}: type a fresh one-time code from your authenticator (or a backup code) to "
                "activate it; that one was wrong, used or expired",
            )
            return back
        try:
            activate_policy_version(version, actor=request.user)
        except ServiceError as error:
            messages.error(request, f"{version}: {error.message}")
            return back
        messages.success(request, f"{version} is now active; the version it replaces is retired.")
        return back

    def dry_run_view(self, request, version_id):
        versions = self.get_queryset(request).select_related("policy__tenant")
        version = get_object_or_404(versions, pk=version_id)
        if not self.has_view_permission(request, version):
            raise PermissionDenied
        return self._render_dry_run(request, version, unsaved=False)

    def _render_dry_run(self, request, draft: PolicyVersion, *, unsaved: bool, back_url: str = ""):
        rows = dry_run(draft, recent_proposals(draft.policy.tenant, DRY_RUN_SIZE))
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
            "back_url": back_url,
        }
        return TemplateResponse(request, "admin/approvals/policyversion/dry_run.html", context)
