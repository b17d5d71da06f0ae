"""Who belongs to a tenant, in which role and which approver groups.

Both approvals/ and audit/ import this app; it imports neither. The models lived in approvals at first
and keep their tables (`db_table` names them) so no row moved: the migrations that moved them
only change Django's state (SeparateDatabaseAndState).

Tenant ─┬─ TenantMembership (role: reviewer | compliance | admin, principal_id)
        ├─ ApproverGroup ── GroupMembership ── User
        └─ ProviderGroupMapping (a group name at the identity provider → ApproverGroup)
"""

from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models
from django.db.models import Q

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class Tenant(models.Model):
    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    # The tenant default fails closed: anything no policy matches needs one of these admins.
    admin_group = models.ForeignKey(
        "ApproverGroup", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    default_ttl_seconds = models.PositiveIntegerField("default TTL (seconds)", default=3600)
    # Intake quotas for all the tenant's agents together (approvals/services/quotas.py); empty: the
    # installation's default (settings TENANT_INTAKE_BURST, TENANT_INTAKE_PER_MINUTE, TENANT_OPEN_PROPOSALS).
    intake_burst = models.PositiveIntegerField(
        null=True, blank=True, help_text="proposals its agents may send at once; empty: TENANT_INTAKE_BURST"
    )
    intake_per_minute = models.PositiveIntegerField(
        null=True, blank=True, help_text="their sustained rate together; empty: TENANT_INTAKE_PER_MINUTE"
    )
    open_proposals_max = models.PositiveIntegerField(
        null=True, blank=True, help_text="proposals waiting for people at most; empty: TENANT_OPEN_PROPOSALS"
    )

    class Meta:
        db_table = "approvals_tenant"

    def __str__(self):
        return self.name


class TenantMembership(models.Model):
    class Role(models.TextChoices):
        REVIEWER = "reviewer"
        COMPLIANCE = "compliance"
        ADMIN = "admin"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tenant_memberships"
    )
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.REVIEWER)
    # The id agents use for this person as `principal.id`: a principal never votes on their own request.
    principal_id = models.CharField(max_length=200, blank=True)

    class Meta:
        db_table = "approvals_tenantmembership"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user"], name="one_membership_per_tenant_user"),
            models.UniqueConstraint(
                fields=["tenant", "principal_id"],
                condition=~Q(principal_id=""),
                name="principal_id_unique_per_tenant",
            ),
        ]

    def __str__(self):
        return f"{self.user} in {self.tenant} as {self.role}"


class ApproverGroup(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="groups")
    slug = models.SlugField()
    name = models.CharField(max_length=200)
    # Typed by hand: the plugin cannot follow `through` to a model defined further down.
    members: "models.ManyToManyField[User, GroupMembership]" = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="GroupMembership", related_name="approver_groups"
    )

    class Meta:
        db_table = "approvals_approvergroup"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "slug"], name="group_slug_unique_per_tenant")
        ]

    def __str__(self):
        return f"{self.tenant.slug}/{self.slug}"


class GroupMembership(models.Model):
    group = models.ForeignKey(ApproverGroup, on_delete=models.CASCADE)

    class ManagedBy(models.TextChoices):
        ADMIN = "", "an admin"
        IDP = "idp", "the identity provider at sign-in"
        SCIM = "scim", "SCIM provisioning"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    added_at = models.DateTimeField(auto_now_add=True)
    # Who keeps this membership: the identity provider's memberships are read-only in the admin (the next
    # sign-in or SCIM call would undo a hand edit).
    managed_by = models.CharField(max_length=10, choices=ManagedBy.choices, default="", blank=True)

    class Meta:
        db_table = "approvals_groupmembership"
        constraints = [
            models.UniqueConstraint(fields=["group", "user"], name="one_membership_per_group_user")
        ]

    def __str__(self):
        return f"{self.user} in {self.group}"


class ProviderGroupMapping(models.Model):
    """People in `external_name` at the tenant's identity provider (the groups claim of an ID token, the
    SAML groups attribute, a SCIM group's displayName) are members of `group`."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="provider_group_mappings")
    external_name = models.CharField("group at the identity provider", max_length=200)
    group = models.ForeignKey(ApproverGroup, on_delete=models.CASCADE, related_name="provider_mappings")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "external_name", "group"], name="one_mapping_per_provider_group_and_group"
            )
        ]

    def __str__(self):
        return f"{self.external_name} → {self.group}"
