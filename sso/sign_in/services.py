"""State changes of single sign-on: a sign-in through the provider (the person found by issuer and
subject, or created just in time), and the approver-group memberships the provider keeps.

Memberships go through approvals' membership services (add_group_member, remove_group_member), which
check the person may join and write group.member_added / group.member_removed; this module then marks
the membership as the provider's (GroupMembership.managed_by), so the admin shows it read-only.
"""

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from approvals.services.tenants import (
    add_group_member,
    group_member_refusal,
    remove_group_member,
    set_tenant_membership,
)
from audit.labels import actor_label, user_label
from audit.models import Verb
from audit.trail import record
from sso.errors import SignInRefused
from sso.models import ExternalIdentity, IdentityProvider, IdentityProviderDevice, ScimUser
from tenants.models import GroupMembership, ProviderGroupMapping, TenantMembership

MAX_GROUP_NAMES = 500  # a groups claim longer than this is refused, not cut (a cut list removes memberships)
MAX_GROUP_NAME_CHARS = 200


def sign_in(provider: IdentityProvider, claims: dict) -> tuple:
    """The person these verified ID-token claims name at this tenant's provider, signed in: found by
    (issuer, subject) or created when the tenant allows it, a member of the tenant, their provider-managed
    groups brought up to date. Returns (user, device); raises SignInRefused changing nothing."""
    subject = claims.get(provider.subject_claim)
    if not isinstance(subject, str) or not subject or len(subject) > 255:
        raise SignInRefused("no_subject", f"the ID token has no usable {provider.subject_claim!r} claim")
    email = _checked_email(provider, claims)
    group_names = _group_names(provider, claims)
    with transaction.atomic():
        identity = (
            ExternalIdentity.objects.select_for_update().select_related("user").at(provider, subject).first()
        )
        if identity is None:
            identity = _first_sign_in(provider, subject, email, claims)
        user = identity.user
        if not user.is_active:
            raise SignInRefused("deactivated", "this account is deactivated; ask your administrator")
        if ScimUser.objects.filter(tenant=provider.tenant, user=user, active=False).exists():
            # The tenant's directory deprovisioned this person: a sign-in at its provider (whose
            # session may outlive the directory's change) does not bring the membership back.
            raise SignInRefused(
                "deprovisioned", f"your access to {provider.tenant.name} was ended by its directory"
            )
        membership = TenantMembership.objects.filter(tenant=provider.tenant, user=user).first()
        if membership is None:
            if not provider.create_users:
                raise SignInRefused("not_provisioned", f"you are not a member of {provider.tenant.name} yet")
            membership = set_tenant_membership(provider.tenant, user)
        changes: dict[str, list[str]] = {"added": [], "removed": []}
        if group_names is not None and membership.role != TenantMembership.Role.COMPLIANCE:
            changes = sync_groups(
                provider.tenant, user, group_names, managed_by=GroupMembership.ManagedBy.IDP
            )
        identity.email = email
        identity.last_sign_in_at = timezone.now()
        identity.save(update_fields=["email", "last_sign_in_at"])
        device, _ = IdentityProviderDevice.objects.get_or_create(
            user=user, name=f"Signed in at {provider.display_name}"[:64], defaults={"confirmed": True}
        )
        record(
            provider.tenant_id,
            actor=actor_label(user),
            verb=Verb.SSO_SIGNED_IN,
            subject=user_label(user),
            data={
                "issuer": provider.issuer,
                "subject": subject,
                "groups_added": changes["added"],
                "groups_removed": changes["removed"],
            },
        )
    return user, device


def record_refusal(provider: IdentityProvider | None, refusal: SignInRefused, *, issuer: str = "") -> None:
    """A refused sign-in leaves a trace on the tenant's chain (or the system chain when no provider of
    ours was named), in a transaction of its own: the refusal changed nothing else."""
    with transaction.atomic():
        record(
            provider.tenant_id if provider else None,
            actor="system",
            verb=Verb.SSO_REFUSED,
            subject=f"identity_provider:{provider.tenant.slug}" if provider else "identity_provider:unknown",
            data={
                "code": refusal.code,
                "reason": refusal.message,
                "issuer": issuer or (provider and provider.issuer),
            },
        )


def _checked_email(provider: IdentityProvider, claims: dict) -> str:
    email = claims.get("email") or ""
    if not isinstance(email, str) or len(email) > 254:
        raise SignInRefused("bad_email", "the ID token's e-mail claim is not an address")
    email = email.strip().lower()
    # Only the JSON boolean true vouches for the address ("false" is a true string); a provider that
    # sends no such claim (SAML, some OIDC providers) is taken at its word, within the allowed domains.
    if "email_verified" in claims and claims["email_verified"] is not True:
        raise SignInRefused("email_unverified", "the provider has not verified this e-mail address")
    domains = provider.email_domains()
    if domains and email.rpartition("@")[2] not in domains:
        raise SignInRefused(
            "email_domain", f"{email or 'an account without e-mail'} is not in a domain this tenant allows"
        )
    return email


def _group_names(provider: IdentityProvider, claims: dict) -> list[str] | None:
    """The provider's group names from the configured claim; None when the tenant maps no groups claim
    (memberships are then left as they are)."""
    if not provider.groups_claim:
        return None
    names = claims.get(provider.groups_claim, [])
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise SignInRefused("bad_groups", f"the {provider.groups_claim!r} claim is not a list of names")
    if len(names) > MAX_GROUP_NAMES or any(len(name) > MAX_GROUP_NAME_CHARS for name in names):
        raise SignInRefused("bad_groups", f"the {provider.groups_claim!r} claim is too long")
    return names


def _first_sign_in(provider: IdentityProvider, subject: str, email: str, claims: dict) -> ExternalIdentity:
    if not provider.create_users:
        raise SignInRefused(
            "not_provisioned", f"no account at {provider.tenant.name} belongs to this identity yet"
        )
    user_model = get_user_model()
    user = user_model.objects.create_user(
        free_username(email or f"{provider.tenant.slug}-{subject}"),
        email=email,
        first_name=str(claims.get("given_name") or "")[:150],
        last_name=str(claims.get("family_name") or "")[:150],
    )
    user.set_unusable_password()  # the provider signs them in; a password would bypass it
    user.save(update_fields=["password"])
    identity = ExternalIdentity.objects.create(
        provider=provider, issuer=provider.issuer, subject=subject, user=user, email=email
    )
    record(
        provider.tenant_id,
        actor="system",
        verb=Verb.PERSON_PROVISIONED,
        subject=user_label(user),
        data={"by": "sign_in", "issuer": provider.issuer, "subject": subject, "email": email},
    )
    return identity


def free_username(wanted: str) -> str:
    """A username nobody has: the wanted one, else with a number. A local account with the same e-mail is
    never taken over (a person is matched by issuer and subject only)."""
    user_model = get_user_model()
    wanted = wanted[:140]
    candidate, number = wanted, 1
    while user_model.objects.filter(username__iexact=candidate).exists():
        number += 1
        candidate = f"{wanted}+{number}"
    return candidate


def sync_groups(tenant, user, group_names: list[str], *, managed_by: str) -> dict:
    """Make the person's `managed_by` memberships match the provider's group names through the tenant's
    mappings: mapped groups joined, those no longer named left at once. Memberships an admin made are not
    touched. Returns the group slugs added and removed."""
    wanted = set(
        ProviderGroupMapping.objects.filter(tenant=tenant, external_name__in=group_names).values_list(
            "group_id", flat=True
        )
    )
    current = {
        membership.group_id: membership
        for membership in GroupMembership.objects.select_related("group").filter(
            group__tenant=tenant, user=user
        )
    }
    added, removed = [], []
    for membership in current.values():
        if membership.managed_by == managed_by and membership.group_id not in wanted:
            remove_group_member(membership.group, user)
            removed.append(membership.group.slug)
    for mapping in (
        ProviderGroupMapping.objects.select_related("group")
        .filter(tenant=tenant, group_id__in=wanted - set(current))
        .distinct()
    ):
        if mapping.group.slug in added:
            continue
        if group_member_refusal(tenant.id, user) is not None:
            break  # e.g. compliance staff: they never vote, whatever the provider says
        add_group_member(mapping.group, user)
        GroupMembership.objects.filter(group=mapping.group, user=user).update(managed_by=managed_by)
        added.append(mapping.group.slug)
    return {"added": sorted(added), "removed": sorted(removed)}
