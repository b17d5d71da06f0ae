"""Membership and role queries that audit/ and approvals/ share: who may open which tenant's pages.

Answers are TenantRef values (id, slug, name, the role that lets the user in), not rows, so callers
cannot write through them. Read only.
"""

from dataclasses import dataclass

from tenants.models import Tenant, TenantMembership

AUDIT_ROLES = frozenset({TenantMembership.Role.COMPLIANCE, TenantMembership.Role.ADMIN})
# Metrics are aggregate and carry no personal identifiers: reviewers may see their own tenant's.
METRICS_ROLES = frozenset(TenantMembership.Role)
# Who may act on a proposal (vote, revoke, note a compensation); compliance reads only.
DECIDING_ROLES = frozenset({TenantMembership.Role.ADMIN, TenantMembership.Role.REVIEWER})


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
        TenantMembership.objects.filter(user=user, role__in=roles)
        .select_related("tenant")
        .order_by("tenant__name")
    )
    return [TenantRef(m.tenant.id, m.tenant.slug, m.tenant.name, m.role) for m in rows]


def tenant_for(user, slug: str, roles=AUDIT_ROLES) -> TenantRef | None:
    """The tenant if the user holds one of `roles` in it; None for everyone else (the view 404s)."""
    if not user.is_authenticated:
        return None
    membership = (
        TenantMembership.objects.filter(user=user, tenant__slug=slug, role__in=roles)
        .select_related("tenant")
        .first()
    )
    if membership is None:
        return None
    return TenantRef(membership.tenant.id, membership.tenant.slug, membership.tenant.name, membership.role)


def tenant_by_key(key: str) -> TenantRef | None:
    """A tenant by slug or numeric id (for management commands)."""
    tenants = Tenant.objects
    tenant = tenants.filter(slug=key).first() or (
        tenants.filter(pk=int(key)).first() if key.isdigit() else None
    )
    return TenantRef(tenant.id, tenant.slug, tenant.name) if tenant else None


def tenant_by_id(tenant_id: int) -> TenantRef | None:
    tenant = Tenant.objects.filter(pk=tenant_id).first()
    return TenantRef(tenant.id, tenant.slug, tenant.name) if tenant else None


def all_tenants() -> list[TenantRef]:
    return [TenantRef(t.id, t.slug, t.name) for t in Tenant.objects.order_by("slug")]
