"""The audit record every app's services write in their own transaction, and the name of who acted."""

from datetime import datetime

from audit.chain import append
from audit.shapes import chain_for_tenant, format_time


def actor_label(actor) -> str:
    """The audit trail's name for who acted: a User, or None for the system (scripts, the worker)."""
    return f"user:{actor.get_username()}" if actor is not None else SYSTEM


SYSTEM = "system"


def record(tenant_id: int | None, *, actor: str, verb: str, subject: str, data: dict | None = None):
    """Append an audit event to the tenant's chain (or the system chain) in the current transaction."""
    return append(chain_for_tenant(tenant_id), actor=actor, verb=verb, subject=subject, data=data or {})


def audit_time(value: datetime | None) -> str | None:
    return format_time(value) if value else None
