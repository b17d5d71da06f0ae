"""The only place audit/ reads rows of the approval domain.

audit/ never imports approvals.models or approvals.services (DESIGN.md "Layout"); these helpers look
the models up lazily through the app registry, read only, and only for what the audit log cannot say:
who may see a tenant's audit pages (TenantMembership), the tenant's slug and name, and, for a
proposal's evidence packet, the envelope the agent sent, the signed token and the outbox rows.
Exports and metrics read the audit log alone.
"""

from dataclasses import dataclass

from django.apps import apps

AUDIT_ROLES = frozenset({"compliance", "admin"})
# Metrics are aggregate and carry no personal identifiers: reviewers may see their own tenant's.
METRICS_ROLES = frozenset({"reviewer", "compliance", "admin"})


def _model(name: str):
    return apps.get_model("approvals", name)


@dataclass(frozen=True)
class TenantRef:
    id: int
    slug: str
    name: str
    role: str = ""

    @property
    def chain(self) -> str:
        return f"tenant:{self.id}"


def tenants_for(user, roles=AUDIT_ROLES) -> list[TenantRef]:
    """The tenants whose audit pages this user may open, with the role that lets them."""
    if not user.is_authenticated:
        return []
    rows = (
        _model("TenantMembership")
        .objects.filter(user=user, role__in=roles)
        .select_related("tenant")
        .order_by("tenant__name")
    )
    return [TenantRef(m.tenant.id, m.tenant.slug, m.tenant.name, m.role) for m in rows]


def tenant_for(user, slug: str, roles=AUDIT_ROLES) -> TenantRef | None:
    """The tenant if the user holds one of `roles` in it; None for everyone else (the view 404s)."""
    if not user.is_authenticated:
        return None
    membership = (
        _model("TenantMembership")
        .objects.filter(user=user, tenant__slug=slug, role__in=roles)
        .select_related("tenant")
        .first()
    )
    if membership is None:
        return None
    return TenantRef(membership.tenant.id, membership.tenant.slug, membership.tenant.name, membership.role)


def tenant_by_key(key: str) -> TenantRef | None:
    """A tenant by slug or numeric id (for management commands)."""
    tenants = _model("Tenant").objects
    tenant = tenants.filter(slug=key).first() or (
        tenants.filter(pk=int(key)).first() if key.isdigit() else None
    )
    return TenantRef(tenant.id, tenant.slug, tenant.name) if tenant else None


def tenant_by_id(tenant_id: int) -> TenantRef | None:
    tenant = _model("Tenant").objects.filter(pk=tenant_id).first()
    return TenantRef(tenant.id, tenant.slug, tenant.name) if tenant else None


def all_tenants() -> list[TenantRef]:
    return [TenantRef(t.id, t.slug, t.name) for t in _model("Tenant").objects.order_by("slug")]


def proposal_record(tenant_id: int, proposal_id) -> dict | None:
    """What the evidence packet needs beyond the audit log, or None if the proposal is not the tenant's."""
    proposal = (
        _model("Proposal").objects.filter(pk=proposal_id, tenant_id=tenant_id).select_related("agent").first()
    )
    if proposal is None:
        return None
    decision = _model("Decision").objects.filter(proposal=proposal).first()
    outbox = _model("OutboxMessage").objects.filter(proposal=proposal).order_by("created_at")
    return {
        "id": str(proposal.id),
        "state": proposal.state,
        "agent": proposal.agent.slug,
        "agent_audience": proposal.agent.audience,
        "envelope": {
            "task_id": proposal.task_id,
            "context_id": proposal.context_id,
            "request_id": proposal.request_id,
            "summary": proposal.summary,
            "action": proposal.action,
            "action_digest": proposal.action_digest,
            "principal": {"id": proposal.principal_id, "display": proposal.principal_display},
            "agent_version": proposal.agent_version,
            "consequences": proposal.consequences,
            "diff": proposal.diff,
            "evidence": proposal.evidence,
            "expires_at": proposal.expires_at,
            "supersedes": str(proposal.supersedes_id or "") or None,
        },
        "requirements": proposal.requirements,
        "transaction_id": proposal.transaction_id,
        "outcome_detail": proposal.outcome_detail,
        "compensation_note": proposal.compensation_note,
        "decision": None
        if decision is None
        else {
            "jti": str(decision.jti),
            "kind": decision.kind,
            "token": decision.token,
            "kid": decision.kid,
            "rev": decision.rev,
            "issued_at": decision.issued_at,
            "expires_at": decision.expires_at,
            "consume_required": decision.consume_required,
            "consumed_at": decision.consumed_at,
            "revoked_at": decision.revoked_at,
            "revoke_reason": decision.revoke_reason,
        },
        "deliveries": [
            {
                "kind": m.kind,
                "message_id": m.message_id,
                "status": m.status,
                "attempts": m.attempts,
                "last_error": m.last_error,
                "created_at": m.created_at,
                "delivered_at": m.delivered_at,
            }
            for m in outbox
        ],
    }
