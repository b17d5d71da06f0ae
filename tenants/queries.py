"""Membership and role queries that audit/, accounts/ and approvals/ share: who may open which tenant's
pages, which tenants and people a staff member configures.

Answers are TenantRef values (id, slug, name, the role that lets the user in), not rows, so callers
cannot write through them; `memberships_of` is the exception, a queryset for callers that narrow or
join it further. Read only.

"Which tenants is this person in" is asked here and nowhere else: `memberships_of` (the rows, any role
or the given roles) and `tenant_ids_of` (their tenant ids).
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


def memberships_of(user, roles=None):
    """The tenants this person is in, as their membership rows (a queryset; only `roles` when given)."""
    rows = TenantMembership.objects.filter(user=user)
    return rows if roles is None else rows.filter(role__in=roles)


def tenant_ids_of(user, roles=None) -> list[int]:
    """The ids of the tenants this person is in (only where they hold one of `roles`, when given)."""
    return list(memberships_of(user, roles).values_list("tenant_id", flat=True))


def tenants_for(user, roles=AUDIT_ROLES) -> list[TenantRef]:
    """The tenants whose audit pages this user may open, with the role that lets them."""
    if not user.is_authenticated:
        return []
    rows = memberships_of(user, roles).select_related("tenant").order_by("tenant__name")
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


# Who a staff member configures: a superuser every tenant and person, a tenant admin her tenants and the
# people in them (the admin's lists and pickers ask these).


def people_visible_to(user, queryset):
    """The accounts this admin may see: all for a superuser; else those sharing a tenant she
    administers, superusers excepted."""
    tenant_ids = admin_tenant_ids(user)
    if tenant_ids is None:
        return queryset
    return queryset.filter(tenant_memberships__tenant_id__in=tenant_ids, is_superuser=False).distinct()


def admin_tenant_ids(user) -> list[int] | None:
    """The tenants this user configures; None means all of them (a superuser)."""
    if user.is_superuser:
        return None
    return tenant_ids_of(user, {TenantMembership.Role.ADMIN})
