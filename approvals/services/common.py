"""Actors and the audit record every service writes in its own transaction."""

from datetime import datetime

from approvals.models import Agent
from audit import chain as audit_chain


def actor_label(actor) -> str:
    """The audit trail's name for who acted: a User, or None for the system (scripts, the worker)."""
    return f"user:{actor.get_username()}" if actor is not None else SYSTEM


def agent_actor(agent: Agent) -> str:
    return f"agent:{agent.slug}"


SYSTEM = "system"


def record(tenant_id: int | None, *, actor: str, verb: str, subject: str, data: dict | None = None):
    """Append an audit event to the tenant's chain (or the system chain) in the current transaction."""
    return audit_chain.append(
        audit_chain.chain_for_tenant(tenant_id), actor=actor, verb=verb, subject=subject, data=data or {}
    )


def proposal_subject(proposal) -> str:
    return f"proposal:{proposal.id}"


def _audit_time(value: datetime | None) -> str | None:
    return audit_chain.format_time(value) if value else None
