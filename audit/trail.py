"""The audit record every app's services write in their own transaction (labels: audit/labels.py)."""

from datetime import datetime

from audit.chain import append
from audit.labels import tenant_chain
from audit.shapes import format_time


def record(tenant_id: int | None, *, actor: str, verb: str, subject: str, data: dict | None = None):
    """Append an audit event to the tenant's chain (or the system chain) in the current transaction."""
    return append(tenant_chain(tenant_id), actor=actor, verb=verb, subject=subject, data=data or {})


def audit_time(value: datetime | None) -> str | None:
    return format_time(value) if value else None
