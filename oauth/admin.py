"""The admin's view of the doors, scoped to the tenants a staff member administers (approvals'
ReadOnlyAdmin): resources (`register_resource` writes them through the service, with the agent
registration and the audit event), accepted challenges and CIBA requests (records)."""

from django.contrib import admin

from approvals.admin.common import ReadOnlyAdmin
from oauth.models import BackchannelRequest, ProtectedResource, TransactionAuthorization


@admin.register(ProtectedResource)
class ProtectedResourceAdmin(ReadOnlyAdmin):
    tenant_path = "agent__tenant"
    list_display = ("agent", "created_at")
    readonly_fields = ("agent", "jwks", "jwks_url", "types", "created_at")


@admin.register(TransactionAuthorization)
class TransactionAuthorizationAdmin(ReadOnlyAdmin):
    tenant_path = "client__tenant"
    list_display = ("id", "resource", "client", "txn", "proposal", "created_at")


@admin.register(BackchannelRequest)
class BackchannelRequestAdmin(ReadOnlyAdmin):
    tenant_path = "client__tenant"
    list_display = ("id", "client", "login_hint", "proposal", "created_at")
