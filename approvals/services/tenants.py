"""Configuration: tenants, memberships and approver groups."""

from django.contrib.auth.models import Group, Permission
from django.db import transaction

from approvals import events
from approvals.models import Proposal
from approvals.selectors import tenant_role
from approvals.states import OPEN_FOR_VOTES
from audit.labels import actor_label, tenant_label, user_label
from audit.models import Verb
from audit.trail import record
from lib.errors import ConfigRefused, Conflict, ServiceError
from tenants.models import ApproverGroup, GroupMembership, Tenant, TenantMembership

# Who may decide and by which rules changes only here: the Django admin, `manage.py setup_tenant` and
# `manage.py policy` call these. `actor` is the user making the change, or None for scripted set-up
# (recorded as system). Policy versions always need people: an author and a different approver.


ADMIN_GROUP_SLUG = "admins"
TTL_TOO_SHORT = "the default time to live is at least one second"


def is_config_admin(user, tenant_id) -> bool:
    """Superusers configure every tenant; a tenant admin configures their own."""
    if user is None or not user.is_active:
        return False
    return user.is_superuser or tenant_role(user, tenant_id) == TenantMembership.Role.ADMIN


def require_config_admin(user, tenant_id) -> None:
    if user is not None and not is_config_admin(user, tenant_id):
        raise ConfigRefused("not_admin", "only an admin of this tenant can change its configuration")


def require_slug(value: str, field: str = "slug") -> str:
    from django.core.exceptions import ValidationError
    from django.core.validators import validate_slug

    try:
        validate_slug(value)
    except ValidationError:
        raise ServiceError("bad_slug", f"{value!r} is not a slug (letters, digits, - and _)", field) from None
    return value


def create_tenant(*, slug: str, name: str, actor=None, default_ttl_seconds: int = 3600) -> Tenant:
    """A tenant with its admin group, which the fail-closed default asks when no policy matches."""
    if actor is not None and not actor.is_superuser:
        raise ConfigRefused("not_admin", "only a superuser creates tenants")
    require_slug(slug)
    if default_ttl_seconds < 1:
        raise ServiceError("bad_ttl", TTL_TOO_SHORT, "default_ttl_seconds")
    with transaction.atomic():
        if Tenant.objects.filter(slug=slug).exists():
            raise Conflict("slug_taken", f"a tenant {slug!r} exists already", "slug")
        tenant = Tenant.objects.create(slug=slug, name=name or slug, default_ttl_seconds=default_ttl_seconds)
        admins = ApproverGroup.objects.create(tenant=tenant, slug=ADMIN_GROUP_SLUG, name="Tenant admins")
        tenant.admin_group = admins
        tenant.save(update_fields=["admin_group"])
        record(
            tenant.id,
            actor=actor_label(actor),
            verb=Verb.TENANT_CREATED,
            subject=tenant_label(slug),
            data={
                "slug": slug,
                "name": tenant.name,
                "default_ttl_seconds": default_ttl_seconds,
                "admin_group": ADMIN_GROUP_SLUG,
            },
        )
    return tenant


def update_tenant(
    tenant: Tenant,
    *,
    actor=None,
    name: str | None = None,
    default_ttl_seconds: int | None = None,
    admin_group: ApproverGroup | None = None,
) -> Tenant:
    """Change a tenant's name, default TTL or admin group (whom the fail-closed default asks)."""
    require_config_admin(actor, tenant.id)
    if admin_group is not None and admin_group.tenant_id != tenant.id:
        raise ServiceError("foreign_group", "the admin group must belong to this tenant", "admin_group")
    if default_ttl_seconds is not None and default_ttl_seconds < 1:
        raise ServiceError("bad_ttl", TTL_TOO_SHORT, "default_ttl_seconds")
    with transaction.atomic():
        # No select_related: PostgreSQL cannot lock the nullable side of the outer join it would make.
        tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
        wanted = {
            "name": name,
            "default_ttl_seconds": default_ttl_seconds,
            "admin_group": admin_group.slug if admin_group is not None else None,
        }
        current = {
            "name": tenant.name,
            "default_ttl_seconds": tenant.default_ttl_seconds,
            "admin_group": tenant.admin_group.slug if tenant.admin_group else None,
        }
        changes = {
            key: [current[key], value]
            for key, value in wanted.items()
            if value is not None and value != current[key]
        }
        if not changes:
            return tenant
        if name is not None:
            tenant.name = name
        if default_ttl_seconds is not None:
            tenant.default_ttl_seconds = default_ttl_seconds
        if admin_group is not None:
            tenant.admin_group = admin_group
        tenant.save(update_fields=["name", "default_ttl_seconds", "admin_group"])
        record(
            tenant.id,
            actor=actor_label(actor),
            verb=Verb.TENANT_CHANGED,
            subject=tenant_label(tenant.slug),
            data={"changes": changes},
        )
    return tenant


def set_tenant_membership(
    tenant: Tenant, user, *, role: str = TenantMembership.Role.REVIEWER, principal_id: str = "", actor=None
) -> TenantMembership:
    """Make a user a member of the tenant (or change their role or principal id). The principal id is how
    agents name this person in `principal.id`; it is what keeps them from deciding their own requests."""
    require_config_admin(actor, tenant.id)
    principal_id = (principal_id or "").strip()
    with transaction.atomic():
        membership = TenantMembership.objects.select_for_update().filter(tenant=tenant, user=user).first()
        previous = {"role": membership.role, "principal_id": membership.principal_id} if membership else None
        if membership is not None and previous == {"role": role, "principal_id": principal_id}:
            return membership
        refusal = membership_refusal(tenant, user, role=role, principal_id=principal_id)
        if refusal is not None:
            raise refusal
        if membership is None:
            membership = TenantMembership.objects.create(
                tenant=tenant, user=user, role=role, principal_id=principal_id
            )
        else:
            membership.role, membership.principal_id = role, principal_id
            membership.save(update_fields=["role", "principal_id"])
        record(
            tenant.id,
            actor=actor_label(actor),
            verb=Verb.MEMBERSHIP_CHANGED,
            subject=user_label(user),
            data={
                "user": user_label(user),
                "role": role,
                "principal_id": principal_id,
                "previous": previous,
            },
        )
    return membership


def membership_refusal(tenant: Tenant, user, *, role: str, principal_id: str) -> ServiceError | None:
    """Why this user cannot hold this role and principal id in the tenant, or None. set_tenant_membership
    enforces it; the admin's form asks it first to show the error on the field."""
    if role not in TenantMembership.Role.values:
        return ServiceError("bad_role", "the role is reviewer, compliance or admin", "role")
    principal_id = (principal_id or "").strip()
    if len(principal_id) > 200:
        return ServiceError("bad_principal_id", "a principal id has at most 200 characters", "principal_id")
    if (
        principal_id
        and TenantMembership.objects.filter(tenant=tenant, principal_id=principal_id)
        .exclude(user=user)
        .exists()
    ):
        return Conflict(
            "principal_id_taken", f"another member already has principal id {principal_id!r}", "principal_id"
        )
    if role == TenantMembership.Role.COMPLIANCE and _group_slugs_of(tenant, user):
        return Conflict(
            "compliance_in_group",
            "compliance staff do not vote: remove them from the approver groups first",
            "role",
        )
    return None


def remove_tenant_membership(tenant: Tenant, user, *, actor=None) -> bool:
    """Take a user out of the tenant, and so out of its approver groups: their approvals stop counting."""
    require_config_admin(actor, tenant.id)
    with transaction.atomic():
        membership = TenantMembership.objects.select_for_update().filter(tenant=tenant, user=user).first()
        if membership is None:
            return False
        for group in ApproverGroup.objects.filter(tenant=tenant, groupmembership__user=user):
            _remove_group_member(group, user, actor=actor)
        previous = {"role": membership.role, "principal_id": membership.principal_id}
        membership.delete()
        record(
            tenant.id,
            actor=actor_label(actor),
            verb=Verb.MEMBERSHIP_CHANGED,
            subject=user_label(user),
            data={"user": user_label(user), "role": None, "principal_id": "", "previous": previous},
        )
    return True


def _group_slugs_of(tenant: Tenant, user) -> list[str]:
    groups = ApproverGroup.objects.filter(tenant=tenant, groupmembership__user=user)
    return list(groups.values_list("slug", flat=True))


def create_group(tenant: Tenant, *, slug: str, name: str = "", actor=None) -> ApproverGroup:
    require_config_admin(actor, tenant.id)
    require_slug(slug)
    with transaction.atomic():
        if ApproverGroup.objects.filter(tenant=tenant, slug=slug).exists():
            raise Conflict("slug_taken", f"the group {slug!r} exists already", "slug")
        group = ApproverGroup.objects.create(
            tenant=tenant, slug=slug, name=name or slug.replace("-", " ").title()
        )
        record(
            tenant.id,
            actor=actor_label(actor),
            verb=Verb.GROUP_CREATED,
            subject=f"group:{slug}",
            data={"slug": slug, "name": group.name},
        )
    return group


def group_member_refusal(tenant_id, user) -> ServiceError | None:
    """Why this user cannot join an approver group of the tenant, or None (the admin's form asks too)."""
    role = tenant_role(user, tenant_id) if tenant_id else None
    if role is None:
        return ServiceError(
            "not_a_member",
            f"{user.get_username()} is not a member of this tenant; add them to it first",
            "user",
        )
    if role == TenantMembership.Role.COMPLIANCE:
        return Conflict("compliance_in_group", "compliance staff read and export; they do not vote", "user")
    return None


def add_group_member(group: ApproverGroup, user, *, actor=None) -> GroupMembership:
    """Make a tenant member eligible to vote where this group is named. Idempotent."""
    require_config_admin(actor, group.tenant_id)
    with transaction.atomic():
        refusal = group_member_refusal(group.tenant_id, user)
        if refusal is not None:
            raise refusal
        membership, created = GroupMembership.objects.get_or_create(group=group, user=user)
        if created:
            record(
                group.tenant_id,
                actor=actor_label(actor),
                verb=Verb.GROUP_MEMBER_ADDED,
                subject=f"group:{group.slug}",
                data={"group": group.slug, "user": user_label(user)},
            )
    return membership


def provider_kept_refusal(membership: GroupMembership) -> Conflict | None:
    """Why an admin may not remove this membership by hand: the identity provider keeps it (at sign-in or
    through SCIM), and its next call would put it back. None for a membership an admin made."""
    if not membership.managed_by:
        return None
    return Conflict(
        "provider_managed",
        f"{membership.user.get_username()}'s membership of {membership.group.slug} is kept by "
        f"{membership.get_managed_by_display()}: change it at the identity provider, not here",
        "user",
    )


def remove_group_member(group: ApproverGroup, user, *, actor=None) -> bool:
    """Take a user out of a group. Their approvals on open proposals stop counting at once (the quorum is
    counted with current memberships); returns whether they were a member. A person (an admin) cannot
    remove a membership the identity provider keeps; the provider's own calls come without an actor."""
    require_config_admin(actor, group.tenant_id)
    with transaction.atomic():
        if actor is not None:
            kept = (
                GroupMembership.objects.filter(group=group, user=user).select_related("group", "user").first()
            )
            refusal = provider_kept_refusal(kept) if kept is not None else None
            if refusal is not None:
                raise refusal
        return _remove_group_member(group, user, actor=actor)


def _remove_group_member(group: ApproverGroup, user, *, actor) -> bool:
    deleted, _ = GroupMembership.objects.filter(group=group, user=user).delete()
    if not deleted:
        return False
    record(
        group.tenant_id,
        actor=actor_label(actor),
        verb=Verb.GROUP_MEMBER_REMOVED,
        subject=f"group:{group.slug}",
        data={"group": group.slug, "user": user_label(user)},
    )
    # Quorum pages showing this person's approval must re-read: it no longer counts.
    for proposal in Proposal.objects.filter(
        tenant_id=group.tenant_id, state__in=OPEN_FOR_VOTES, votes__voter=user
    ).distinct():
        events.proposal_changed(proposal)
    return True


# The Django admin for a tenant admin who is not a superuser: the pages of what they configure (the
# admin's querysets keep them to their own tenants). Decisions, votes and the outbox are read-only there.
ADMIN_SITE_GROUP = "Tenant admins"
ADMIN_SITE_PERMISSIONS = {
    # Seeing people (only those who share a tenant with her: accounts/admin.py) lets her pick members
    # by username in the membership forms' autocomplete.
    "auth": {"user": ["view"]},
    "tenants": {
        "tenant": ["view", "change"],
        "tenantmembership": ["view", "add", "change", "delete"],
        "approvergroup": ["view", "add", "change", "delete"],
        "groupmembership": ["view", "add", "change", "delete"],
    },
    "approvals": {
        "agent": ["view", "add", "change"],
        "policy": ["view", "add", "change"],
        "policyversion": ["view", "add"],
        "halt": ["view", "add"],
        "proposal": ["view"],
        "vote": ["view"],
        "decision": ["view"],
        "outboxmessage": ["view"],
    },
}


def grant_admin_site(tenant: Tenant, user, *, actor=None) -> None:
    """Let a tenant admin use /admin/ for their tenant: staff status and the `Tenant admins` permission
    group (made on first use). Idempotent; audited on the tenant's chain when it changes anything."""
    require_config_admin(actor, tenant.id)
    if tenant_role(user, tenant.id) != TenantMembership.Role.ADMIN:
        raise ConfigRefused("not_admin", f"{user.get_username()} is not an admin of {tenant.slug}")
    with transaction.atomic():
        group, _ = Group.objects.get_or_create(name=ADMIN_SITE_GROUP)
        wanted = [
            Permission.objects.get(content_type__app_label=app, codename=f"{verb}_{model}")
            for app, models in ADMIN_SITE_PERMISSIONS.items()
            for model, verbs in models.items()
            for verb in verbs
        ]
        group.permissions.add(*wanted)
        if user.is_staff and user.groups.filter(pk=group.pk).exists():
            return
        user.is_staff = True
        user.save(update_fields=["is_staff"])
        user.groups.add(group)
        record(
            tenant.id,
            actor=actor_label(actor),
            verb=Verb.MEMBERSHIP_CHANGED,
            subject=user_label(user),
            data={"user": user_label(user), "admin_site": True},
        )
