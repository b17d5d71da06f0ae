"""Read-only admins of what the services wrote: proposals (agent text shown isolated, its hidden characters
badged), votes, decisions, break-glass releases and their reviews, the outbox. People decide in the
reviewer pages, never here."""

import json

from django.contrib import admin

from approvals.admin.common import ReadOnlyAdmin
from approvals.models import (
    BreakGlassRelease,
    Decision,
    OutboxMessage,
    PostHocReview,
    Proposal,
    Vote,
)
from approvals.templatetags.agent_text import agent_text_html

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
    fields = readonly_fields = (
        "voter",
        "verdict",
        "group",
        "reason",
        "auth_method",
        "auth_at",
        "digest_seen",
        "created_at",
    )
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
    "target_key",
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

    column.__name__ = f"shown_{name}"
    return admin.display(description=name.replace("_", " "))(column)


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
    # Agent text is isolated and its hidden characters badged: the raw fields are replaced by
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
