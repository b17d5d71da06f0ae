"""State changes of SCIM provisioning, per tenant: people created, changed, deactivated and deleted, and
the groups the provisioning client pushes, whose members join the approver groups their names map to.

Deprovisioning (`active: false`, or DELETE) takes effect at once: the person leaves the tenant and its
approver groups through approvals' membership services (their approvals on open proposals stop counting;
votes they cast stay recorded), their sessions end, their open pages are told to re-check and close, and
their account is deactivated when no other tenant has them. Every change is an audit event of the
tenant's chain, by the actor `scim:<tenant>`.
"""

import uuid

from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction

from approvals.services.tenants import remove_tenant_membership, set_tenant_membership
from audit.labels import user_label
from audit.models import Verb
from audit.trail import record
from sso.errors import ProvisioningRefused
from sso.models import ExternalIdentity, IdentityProvider, ScimGroup, ScimUser
from sso.sign_in.services import free_username, sync_groups
from tenants.models import GroupMembership, TenantMembership
from tenants.queries import memberships_of

MAX_MEMBERS_PER_REQUEST = 1000
MAX_GROUP_NAME_CHARS = 200  # ScimGroup.display_name
MAX_EMAIL_CHARS = 254  # RFC 5321's longest path, as Django's EmailField


def actor(tenant) -> str:
    return f"scim:{tenant.slug}"


def _clean_person(values: dict) -> dict:
    user_name = values.get("user_name")
    if not isinstance(user_name, str) or not user_name.strip() or len(user_name) > 150:
        raise ProvisioningRefused(400, "userName is required (at most 150 characters)", "invalidValue")
    email = values.get("email") or ""
    addresses = [email, *(entry.get("value", "") for entry in values.get("emails", []))]
    if any(len(address) > MAX_EMAIL_CHARS for address in addresses):
        raise ProvisioningRefused(
            400, f"an e-mail address is at most {MAX_EMAIL_CHARS} characters", "invalidValue"
        )
    if email:
        try:
            validate_email(email)
        except ValidationError:
            raise ProvisioningRefused(400, f"{email!r} is not an e-mail address", "invalidValue") from None
    external_id = values.get("external_id") or ""
    if not isinstance(external_id, str) or len(external_id) > 255:
        raise ProvisioningRefused(400, "externalId is a string of at most 255 characters", "invalidValue")
    return {**values, "user_name": user_name.strip(), "email": email.lower(), "external_id": external_id}


def provision_user(tenant, values: dict) -> ScimUser:
    """POST /Users: a new person of the tenant (a reviewer, in no group until a SCIM group or the
    provider says so). `values`: user_name, external_id, email, given_name, family_name, active."""
    values = _clean_person(values)
    provider = IdentityProvider.objects.filter(tenant=tenant).first()
    with transaction.atomic():
        if ScimUser.objects.filter(tenant=tenant, user_name__iexact=values["user_name"]).exists():
            raise ProvisioningRefused(409, f"userName {values['user_name']!r} exists already", "uniqueness")
        identity = None
        if provider is not None and values["external_id"]:
            # This tenant's provider only: another tenant's person with the same subject at a shared
            # issuer is another account (sso/models.py).
            identity = ExternalIdentity.objects.at(provider, values["external_id"]).first()
        if identity is not None:
            user = identity.user
            if ScimUser.objects.filter(tenant=tenant, user=user).exists():
                raise ProvisioningRefused(
                    409, f"externalId {values['external_id']!r} is provisioned already", "uniqueness"
                )
        else:
            user = get_user_model().objects.create_user(
                free_username(values["user_name"]), email=values["email"]
            )
            user.set_unusable_password()  # the provider signs them in
        if account_is_the_tenants_alone(tenant, user):
            user.first_name = (values.get("given_name") or "")[:150]
            user.last_name = (values.get("family_name") or "")[:150]
            user.email = values["email"]
            user.save(update_fields=["first_name", "last_name", "email"])
        if provider is not None and values["external_id"] and identity is None:
            ExternalIdentity.objects.create(
                provider=provider, issuer=provider.issuer, subject=values["external_id"], user=user
            )
        scim_user = ScimUser.objects.create(
            tenant=tenant,
            user=user,
            user_name=values["user_name"],
            external_id=values["external_id"],
            emails=values.get("emails") or [],
        )
        _provisioned_in(tenant, user, {"external_id": values["external_id"]})
        if values.get("active") is False:
            _deactivate(scim_user)
    return scim_user


def update_user(scim_user: ScimUser, values: dict) -> ScimUser:
    """PUT or PATCH /Users/<id>: the given attributes replaced; `active` false deprovisions at once, true
    brings the person back into the tenant (groups follow from the SCIM groups they are in)."""
    tenant = scim_user.tenant
    values = _clean_person({"user_name": scim_user.user_name, "external_id": scim_user.external_id, **values})
    with transaction.atomic():
        scim_user = ScimUser.objects.select_for_update().select_related("user", "tenant").get(pk=scim_user.pk)
        user = scim_user.user
        before = {"user_name": scim_user.user_name, "email": user.email, "active": scim_user.active}
        clash = ScimUser.objects.filter(tenant=tenant, user_name__iexact=values["user_name"]).exclude(
            pk=scim_user.pk
        )
        if clash.exists():
            raise ProvisioningRefused(409, f"userName {values['user_name']!r} exists already", "uniqueness")
        scim_user.user_name = values["user_name"]
        scim_user.external_id = values["external_id"]
        if "emails" in values:
            scim_user.emails = values["emails"]
        scim_user.save(update_fields=["user_name", "external_id", "emails", "updated_at"])
        if account_is_the_tenants_alone(tenant, user):
            names = (("first_name", "given_name"), ("last_name", "family_name"), ("email", "email"))
            for field, key in names:
                if key in values and values[key] is not None:
                    setattr(user, field, values[key][:150] if field != "email" else values[key])
            user.save(update_fields=["first_name", "last_name", "email"])
        after = {"user_name": scim_user.user_name, "email": user.email, "active": scim_user.active}
        if before != after:
            # Which fields changed, not their values: names and addresses stay out of the trail.
            record(
                tenant.id,
                actor=actor(tenant),
                verb=Verb.PERSON_CHANGED,
                subject=user_label(user),
                data={"by": "scim", "fields": sorted(key for key in after if before[key] != after[key])},
            )
        if values.get("active") is False and scim_user.active:
            _deactivate(scim_user)
        elif values.get("active") is True and not scim_user.active:
            _reactivate(scim_user)
    return scim_user


def delete_user(scim_user: ScimUser) -> None:
    """DELETE /Users/<id>: deprovisioned as for `active: false`, and the SCIM resource removed. The account
    itself stays (deactivated) so the votes and audit events that name it keep their meaning."""
    with transaction.atomic():
        scim_user = ScimUser.objects.select_for_update().select_related("user", "tenant").get(pk=scim_user.pk)
        if scim_user.active:
            _deactivate(scim_user)
        record(
            scim_user.tenant_id,
            actor=actor(scim_user.tenant),
            verb=Verb.PERSON_DEPROVISIONED,
            subject=user_label(scim_user.user),
            data={"by": "scim", "deleted": True},
        )
        scim_user.delete()


def account_is_the_tenants_alone(tenant, user) -> bool:
    """Whether the tenant's directory may write the account's names and e-mail: only while no other
    tenant has the person (an account an admin also put in another tenant keeps what that tenant's
    notices rely on; the SCIM record still takes the new values)."""
    return not memberships_of(user).exclude(tenant=tenant).exists()


def _deactivate(scim_user: ScimUser) -> None:
    from sso.scim.access import access_ended  # sockets and sessions: imports the channel layer

    tenant, user = scim_user.tenant, scim_user.user
    scim_user.active = False
    scim_user.save(update_fields=["active", "updated_at"])
    removed_groups = list(
        GroupMembership.objects.filter(group__tenant=tenant, user=user).values_list("group__slug", flat=True)
    )
    remove_tenant_membership(tenant, user)  # out of its groups too; each removal its own event
    still_member_elsewhere = memberships_of(user).exists()
    if not still_member_elsewhere and user.is_active:
        user.is_active = False
        user.save(update_fields=["is_active"])
    sessions_ended = end_sessions(user) if not still_member_elsewhere else 0
    record(
        tenant.id,
        actor=actor(tenant),
        verb=Verb.PERSON_DEPROVISIONED,
        subject=user_label(user),
        data={
            "by": "scim",
            "groups_removed": sorted(removed_groups),
            "account_deactivated": not still_member_elsewhere,
            "sessions_ended": sessions_ended,
        },
    )
    access_ended(tenant, user)


def _reactivate(scim_user: ScimUser) -> None:
    tenant, user = scim_user.tenant, scim_user.user
    scim_user.active = True
    scim_user.save(update_fields=["active", "updated_at"])
    if not user.is_active:
        user.is_active = True
        user.save(update_fields=["is_active"])
    _provisioned_in(tenant, user, {"reactivated": True})
    _sync_scim_groups(scim_user)


def _provisioned_in(tenant, user, data: dict) -> None:
    """The person works in the tenant (a membership if they had none), recorded as provisioned by SCIM."""
    if not TenantMembership.objects.filter(tenant=tenant, user=user).exists():
        set_tenant_membership(tenant, user)
    record(
        tenant.id,
        actor=actor(tenant),
        verb=Verb.PERSON_PROVISIONED,
        subject=user_label(user),
        data={"by": "scim", **data},
    )


def end_sessions(user) -> int:
    """Delete the person's sessions (database sessions: the ones this project uses). Returns how many."""
    ended = 0
    for session in Session.objects.all().iterator():
        if str(session.get_decoded().get("_auth_user_id")) == str(user.pk):
            session.delete()
            ended += 1
    return ended


def _sync_scim_groups(scim_user: ScimUser) -> dict:
    if not scim_user.active:
        return {"added": [], "removed": []}
    names = list(scim_user.groups.values_list("display_name", flat=True))
    membership = TenantMembership.objects.filter(tenant=scim_user.tenant, user=scim_user.user).first()
    if membership is None or membership.role == TenantMembership.Role.COMPLIANCE:
        return {"added": [], "removed": []}
    return sync_groups(scim_user.tenant, scim_user.user, names, managed_by=GroupMembership.ManagedBy.SCIM)


def _is_scim_id(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _members(tenant, member_ids: list) -> list[ScimUser]:
    if len(member_ids) > MAX_MEMBERS_PER_REQUEST:
        raise ProvisioningRefused(400, f"at most {MAX_MEMBERS_PER_REQUEST} members per request", "tooMany")
    not_ids = [value for value in member_ids if not _is_scim_id(value)]
    if not_ids:
        raise ProvisioningRefused(400, f"no user {not_ids[0]!r} in this tenant", "invalidValue")
    found = {
        str(user.scim_id): user for user in ScimUser.objects.filter(tenant=tenant, scim_id__in=member_ids)
    }
    missing = [value for value in member_ids if value not in found]
    if missing:
        raise ProvisioningRefused(400, f"no user {missing[0]!r} in this tenant", "invalidValue")
    return list(found.values())


def save_group(
    tenant,
    group: ScimGroup | None,
    *,
    display_name: str | None = None,
    external_id: str | None = None,
    set_members: list | None = None,
    add_members: list | None = None,
    remove_members: list | None = None,
) -> ScimGroup:
    """POST, PUT or PATCH /Groups: a group created or changed; each person whose membership changed has
    their SCIM-managed approver groups brought up to date at once."""
    if display_name is not None and (not isinstance(display_name, str) or not display_name.strip()):
        raise ProvisioningRefused(400, "displayName is required", "invalidValue")
    if display_name is not None and len(display_name.strip()) > MAX_GROUP_NAME_CHARS:
        raise ProvisioningRefused(
            400, f"displayName is at most {MAX_GROUP_NAME_CHARS} characters", "invalidValue"
        )
    try:
        with transaction.atomic():
            created = group is None
            if group is None:
                if display_name is None:
                    raise ProvisioningRefused(400, "displayName is required", "invalidValue")
                group = ScimGroup.objects.create(tenant=tenant, display_name=display_name.strip())
            group = ScimGroup.objects.select_for_update().get(pk=group.pk)
            before_name = group.display_name
            before = set(group.members.values_list("scim_id", flat=True))
            if display_name is not None:
                group.display_name = display_name.strip()
            if external_id is not None:
                group.external_id = str(external_id)[:255]
            group.save()
            if set_members is not None:
                group.members.set(_members(tenant, [str(value) for value in set_members]))
            if add_members:
                group.members.add(*_members(tenant, [str(value) for value in add_members]))
            if remove_members:
                ids = [
                    str(value) for value in remove_members if _is_scim_id(str(value))
                ]  # others name no one
                group.members.remove(*ScimUser.objects.filter(tenant=tenant, scim_id__in=ids))
            after = set(group.members.values_list("scim_id", flat=True))
            changed_people = before ^ after if before_name == group.display_name else before | after
            for scim_user in ScimUser.objects.filter(scim_id__in=changed_people).select_related(
                "user", "tenant"
            ):
                _sync_scim_groups(scim_user)
            if created or before != after or before_name != group.display_name:
                record(
                    tenant.id,
                    actor=actor(tenant),
                    verb=Verb.SCIM_GROUP_CHANGED,
                    subject=f"scim_group:{group.display_name}",
                    data={
                        "created": created,
                        "display_name": [before_name, group.display_name],
                        "members_added": sorted(str(value) for value in after - before),
                        "members_removed": sorted(str(value) for value in before - after),
                    },
                )
    except IntegrityError:
        raise ProvisioningRefused(409, f"a group {display_name!r} exists already", "uniqueness") from None
    return group


def delete_group(group: ScimGroup) -> None:
    with transaction.atomic():
        tenant = group.tenant
        people = list(group.members.select_related("user", "tenant"))
        name = group.display_name
        group.delete()
        for scim_user in people:
            _sync_scim_groups(scim_user)
        record(
            tenant.id,
            actor=actor(tenant),
            verb=Verb.SCIM_GROUP_CHANGED,
            subject=f"scim_group:{name}",
            data={"deleted": True, "members_removed": sorted(str(p.scim_id) for p in people)},
        )
