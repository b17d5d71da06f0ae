"""Agents in the admin: registering one (its tokens shown once), editing it, rotating its tokens."""

from django import forms
from django.contrib import admin, messages
from django.utils.html import format_html

from approvals.admin.common import TenantScopedAdmin, adopt_stored
from approvals.models import Agent, QuotaState
from approvals.services.agents import (
    AGENT_EDITABLE,
    delivery_for,
    refuse_shared_identity,
    register_agent,
    rotate_agent_tokens,
    update_agent,
)
from approvals.services.quotas import LIMIT_FIELDS, agent_limits, set_agent_limits
from lib.errors import ServiceError
from lib.tokens import new_token

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

    def clean_approval_extension(self):
        return self.cleaned_data.get("approval_extension") or Agent.ApprovalExtension.REVIEWER

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
            "approval_extension",
            *LIMIT_FIELDS,
        ]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "approval_extension" in self.fields:
            # Left out of a form (an older script posting it): the agent speaks Reviewer's own extension.
            self.fields["approval_extension"].required = False
        if "audience" in self.fields:
            self.fields["audience"].required = False
            self.fields["audience"].help_text = (
                "The `aud` of its decisions; empty means the agent card URL. Like the card URL, it is this "
                "agent's own: no other agent, in any tenant, may have it."
            )

    def clean(self):
        super().clean()
        cleaned = self.cleaned_data
        card_url = cleaned.get("card_url") or ""
        audience = cleaned.get("audience") or card_url
        try:
            # Pull exactly without a card URL; the model's constraint checks the pair.
            self.instance.delivery = delivery_for(card_url, audience)
            tenant = cleaned.get("tenant")
            refuse_shared_identity(
                card_url, audience, tenant_id=tenant.pk if tenant else None, other_than=self.instance.pk
            )
        except ServiceError as refusal:
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
        return ["tenant", "slug", "created_at", "intake_quotas"] if obj else []

    @admin.display(description="Intake quotas in force")
    def intake_quotas(self, obj):
        """What counts now (its own limits, else the settings'), and its latest throttle window."""
        limits = agent_limits(obj)
        state = QuotaState.objects.filter(agent=obj).first()
        throttled = (
            format_html(
                "; refused {} since {} ({})", state.refused, state.throttled_at, state.throttled_limit
            )
            if state is not None and state.throttled_at is not None
            else ""
        )
        return format_html(
            "{} at once, {} a minute, {} waiting for people at most{}",
            limits.burst,
            limits.per_minute,
            limits.open_max,
            throttled,
        )

    def save_model(self, request, obj, form, change):
        # Empty: the installation's default (settings), which the field's help text names.
        limits = {name: form.cleaned_data.get(name) for name in LIMIT_FIELDS}
        if change:
            changes = {name: form.cleaned_data[name] for name in AGENT_EDITABLE if name in form.cleaned_data}
            if not changes.get("outbound_auth_credentials"):
                changes.pop("outbound_auth_credentials", None)
            changes["audience"] = changes.get("audience") or obj.card_url
            agent = update_agent(Agent.objects.get(pk=obj.pk), actor=request.user, **changes)
            adopt_stored(obj, set_agent_limits(agent, actor=request.user, **limits))
            return
        push_token, api_token = new_token(), new_token()
        agent = register_agent(
            tenant=obj.tenant,
            slug=obj.slug,
            name=obj.name,
            card_url=obj.card_url,
            audience=obj.audience,
            push_token=push_token,
            api_token=api_token,
            outbound_auth_scheme=obj.outbound_auth_scheme,
            outbound_auth_credentials=form.cleaned_data.get("outbound_auth_credentials", ""),
            approval_extension=obj.approval_extension,
            actor=request.user,
        )
        adopt_stored(obj, set_agent_limits(agent, actor=request.user, **limits))
        _show_tokens_once(request, agent, push_token, api_token)

    @admin.action(description="Rotate tokens (the old ones stop working now)")
    def rotate_tokens(self, request, queryset):
        for agent in queryset:
            try:
                push_token, api_token = rotate_agent_tokens(agent, actor=request.user)
            except ServiceError as error:
                messages.error(request, f"{agent.slug}: {error.message}")
                continue
            _show_tokens_once(request, agent, push_token, api_token)
