"""Out of office: a person lends their eligibility to a delegate for a period (approvals/selectors/standins.py
says what the delegate may then decide). Setting one, ending one early, its end on time, and each use
(a delegate's vote, recorded by the vote) are audit events.
"""

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from approvals.models.notifications import Delegation
from audit.labels import SYSTEM, actor_label, user_label
from audit.models import Verb
from audit.trail import audit_time, record
from lib.errors import ActionRefused
from tenants.models import TenantMembership

# A delegation is for an absence, not a standing arrangement: at most this long.
MAX_DAYS = 92


class DelegationRefused(ActionRefused):
    pass


def _subject(delegation: Delegation) -> str:
    return f"delegation:{delegation.pk}"


def set_delegation(
    *, actor, tenant, delegate, starts_at: datetime, ends_at: datetime, note: str = ""
) -> Delegation:
    """`actor` lends their eligibility in `tenant` to `delegate` from `starts_at` to `ends_at`. A
    `delegate` of None (a name nobody has) is refused as, and where, a person of another tenant is: the
    answer tells no other tenant's people apart from names nobody has."""
    now = timezone.now()
    if delegate is not None and delegate.pk == actor.pk:
        raise DelegationRefused("bad_delegate", "name someone else as your delegate", "delegate")
    if ends_at <= starts_at:
        raise DelegationRefused("bad_period", "the end must be after the start", "ends_at")
    if ends_at <= now:
        raise DelegationRefused("bad_period", "the end is in the past", "ends_at")
    if ends_at - starts_at > timedelta(days=MAX_DAYS):
        raise DelegationRefused("bad_period", f"a delegation lasts at most {MAX_DAYS} days", "ends_at")
    roles = dict(
        TenantMembership.objects.filter(
            tenant=tenant, user__in=[actor.pk] if delegate is None else [actor.pk, delegate.pk]
        ).values_list("user_id", "role")
    )
    if roles.get(actor.pk) in (None, TenantMembership.Role.COMPLIANCE):
        raise DelegationRefused("not_eligible", "compliance staff and outsiders have no eligibility to lend")
    if (
        delegate is None
        or roles.get(delegate.pk) in (None, TenantMembership.Role.COMPLIANCE)
        or not delegate.is_active
    ):
        raise DelegationRefused(
            "bad_delegate", "the delegate must be an active reviewer or admin of this tenant", "delegate"
        )
    with transaction.atomic(durable=True):
        overlapping = Delegation.objects.filter(
            tenant=tenant, delegator=actor, starts_at__lt=ends_at, ends_at__gt=starts_at, ended_at=None
        )
        if overlapping.select_for_update().exists():
            raise DelegationRefused("overlap", "you already have a delegation in that period; end it first")
        delegation = Delegation.objects.create(
            tenant=tenant,
            delegator=actor,
            delegate=delegate,
            starts_at=starts_at,
            ends_at=ends_at,
            note=(note or "").strip()[:200],
        )
        record(
            tenant.pk,
            actor=actor_label(actor),
            verb=Verb.DELEGATION_CREATED,
            subject=_subject(delegation),
            data={
                "delegator": user_label(actor),
                "delegate": user_label(delegate),
                "starts_at": audit_time(starts_at),
                "ends_at": audit_time(ends_at),
                "note": delegation.note,
            },
        )
    return delegation


def end_delegation(delegation_id, *, actor) -> Delegation:
    """End a delegation now: its delegator or a tenant admin may."""
    with transaction.atomic(durable=True):
        delegation = Delegation.objects.select_for_update().filter(pk=delegation_id).first()
        if delegation is None:
            raise DelegationRefused("not_found", "no such delegation")
        is_admin = TenantMembership.objects.filter(
            tenant_id=delegation.tenant_id, user=actor, role=TenantMembership.Role.ADMIN
        ).exists()
        if delegation.delegator_id != actor.pk and not is_admin:
            raise DelegationRefused("not_found", "no such delegation")
        now = timezone.now()
        if delegation.ended_at is not None or delegation.ends_at <= now:
            raise DelegationRefused("already_ended", "this delegation has already ended")
        delegation.ended_at = now
        delegation.end_recorded = True
        delegation.save(update_fields=["ended_at", "end_recorded"])
        record(
            delegation.tenant_id,
            actor=actor_label(actor),
            verb=Verb.DELEGATION_ENDED,
            subject=_subject(delegation),
            data={"early": True, "at": audit_time(now)},
        )
    return delegation


def record_used(delegation_user, delegate, proposal) -> None:
    """A delegate's vote on a delegator's behalf (inside the vote's transaction)."""
    record(
        proposal.tenant_id,
        actor=actor_label(delegate),
        verb=Verb.DELEGATION_USED,
        subject=f"proposal:{proposal.id}",
        data={"delegate": user_label(delegate), "on_behalf_of": user_label(delegation_user)},
    )


def note_ended_delegations(now: datetime | None = None) -> int:
    """The worker's step: record, once, each delegation whose period is over."""
    now = now or timezone.now()
    noted = 0
    for delegation_id in Delegation.objects.filter(end_recorded=False, ends_at__lte=now).values_list(
        "pk", flat=True
    )[:200]:
        with transaction.atomic(durable=True):
            delegation = (
                Delegation.objects.select_for_update().filter(pk=delegation_id, end_recorded=False).first()
            )
            if delegation is None:
                continue
            delegation.end_recorded = True
            delegation.save(update_fields=["end_recorded"])
            record(
                delegation.tenant_id,
                actor=SYSTEM,
                verb=Verb.DELEGATION_ENDED,
                subject=_subject(delegation),
                data={"early": False, "at": audit_time(delegation.ends_at)},
            )
            noted += 1
    return noted
