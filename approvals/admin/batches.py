"""The read-only admin of batches (approvals/models/batches.py): the manifest as submitted and as it is
now, the merged rule, the revocation, and each member with its standing. People decide on the batch's
page, never here."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.safestring import SafeString

from approvals.admin.common import ReadOnlyAdmin
from approvals.models import Batch, BatchMember
from approvals.templatetags.agent_text import agent_text_html


class BatchMemberInline(admin.TabularInline):  # type: ignore[type-arg]
    model = BatchMember
    fields = readonly_fields = ("position", "proposal", "standing")
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Batch)
class BatchAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "batch_id", "tenant", "agent", "manifest_digest", "revoked_at"]
    list_filter = ["tenant"]
    list_select_related = ["tenant", "agent"]
    search_fields = ["batch_id", "task_id", "manifest_digest", "submitted_digest"]
    date_hierarchy = "created_at"
    inlines = [BatchMemberInline]
    exclude = ["summary"]  # agent text: shown isolated, its hidden characters badged
    readonly_fields = ["shown_summary"]

    @admin.display(description="summary")
    def shown_summary(self, batch: Batch) -> SafeString:
        return agent_text_html(batch.summary)
