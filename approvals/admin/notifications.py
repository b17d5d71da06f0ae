"""The admin's views of notification settings (registered from approvals/admin/__init__.py): tenant admins add
webhook endpoints here (through the service, which makes the signing secret, shown once), and see the
Slack workspaces, Teams channels, delegations and push devices of their tenants. Slack workspaces and
Teams channels hold only references to their secrets ("env:NAME" / "file:/path")."""

from django import forms
from django.contrib import admin, messages

from approvals.admin.common import ReadOnlyAdmin, TenantScopedAdmin
from approvals.models.notifications import (
    Delegation,
    PushSubscription,
    SlackWorkspace,
    TeamsBot,
    TeamsChannel,
    WebhookEndpoint,
)
from approvals.services.webhooks import EVENT_TYPES, endpoint_refusal, register_endpoint
from lib.errors import ServiceError


class WebhookEndpointForm(forms.ModelForm):
    url = forms.URLField(max_length=500, assume_scheme="https")
    events = forms.MultipleChoiceField(
        choices=[(e, e) for e in EVENT_TYPES],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="none ticked: every event",
    )

    class Meta:
        model = WebhookEndpoint
        fields = ["tenant", "url", "events"]

    def clean(self):
        """The service's own check, shown on its field: a URL Reviewer would not deliver to says why."""
        cleaned = super().clean() or {}
        if self.instance.pk is None and not self.errors:
            refusal = endpoint_refusal(cleaned.get("url", ""), list(cleaned.get("events", [])))
            if refusal is not None:
                self.add_error(refusal.field if refusal.field in self.fields else None, refusal.message)
        return cleaned


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(TenantScopedAdmin):
    form = WebhookEndpointForm
    list_display = ["url", "tenant", "enabled", "created_at"]
    list_filter = ["tenant", "enabled"]

    def get_readonly_fields(self, request, obj=None):
        return ["tenant", "url", "events"] if obj else []

    def save_model(self, request, obj, form, change):
        if change:
            return
        try:
            stored = register_endpoint(
                tenant=form.cleaned_data["tenant"],
                url=form.cleaned_data["url"],
                events=form.cleaned_data["events"],
                actor=request.user,
            )
        except ServiceError as refusal:
            messages.error(request, refusal.message)
            return
        obj.pk = stored.pk
        messages.warning(
            request, f"The signing secret, shown this once (give it to the receiver): {stored.secret}"
        )


@admin.register(SlackWorkspace)
class SlackWorkspaceAdmin(ReadOnlyAdmin):
    list_display = ["team_id", "tenant", "channels", "enabled"]
    fields = ["tenant", "team_id", "bot_token_ref", "signing_secret_ref", "channels", "enabled"]


@admin.register(TeamsBot)
class TeamsBotAdmin(ReadOnlyAdmin):
    list_display = ["app_id", "tenant", "service_url", "enabled"]
    fields = ["tenant", "app_id", "app_password_ref", "service_url", "enabled"]


@admin.register(TeamsChannel)
class TeamsChannelAdmin(ReadOnlyAdmin):
    list_display = ["name", "tenant", "bot", "groups", "enabled"]
    fields = ["tenant", "name", "bot", "conversation_id", "webhook_url_ref", "groups", "enabled"]


@admin.register(Delegation)
class DelegationAdmin(ReadOnlyAdmin):
    list_display = ["delegator", "delegate", "tenant", "starts_at", "ends_at", "ended_at"]
    list_filter = ["tenant"]
    ordering = ["-starts_at"]


@admin.register(PushSubscription)
class PushSubscriptionAdmin(ReadOnlyAdmin):
    tenant_path = "user__tenant_memberships__tenant"
    list_display = ["name", "user", "created_at"]

    def limit_to_tenants(self, queryset, tenant_ids):
        return super().limit_to_tenants(queryset, tenant_ids).distinct()  # a person in several tenants

    fields = ["user", "name", "created_at"]
