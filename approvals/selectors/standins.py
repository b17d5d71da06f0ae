"""Who may decide a proposal besides the members of its threshold groups (read-only; the eligibility and
quorum services ask here):

- a **stand-in**: a person its escalation step added (StandIn rows, written by the worker at the step's
  time): they may fill any of the proposal's threshold slots;
- a **delegate**: while a Delegation is active, the delegate may fill the slots the delegator could
  fill, on the delegator's behalf. Separation of duties holds for both people: a delegation from the
  proposal's principal, from the author of its edit or from compliance staff lends nothing, and the
  delegate is checked as any voter (the principal cannot decide through someone's delegation).

A person fills at most one slot either way (the quorum's matching places votes, not people's groups),
and a delegator and their delegate are one voice: once one of them voted, the other cannot
(`voices_cast`).
"""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.db.models import Q
from django.utils import timezone

from approvals.models.notifications import Delegation, StandIn
from tenants.models import GroupMembership, TenantMembership

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def stand_in_users(proposal) -> set[int]:
    return set(StandIn.objects.filter(proposal=proposal).values_list("user_id", flat=True))


def active_delegations(tenant_id, delegate_id, at=None):
    """The delegations lent to `delegate_id` in this tenant that are active at `at` (default now)."""
    at = at or timezone.now()
    return (
        Delegation.objects.filter(
            tenant_id=tenant_id, delegate_id=delegate_id, starts_at__lte=at, ends_at__gt=at
        )
        .exclude(ended_at__lte=at)
        .select_related("delegator")
        .order_by("starts_at", "id")
    )


def _lends_nothing(proposal, delegator_id) -> bool:
    """Separation of duties for the delegator: the principal, the edit's author and compliance staff
    have no eligibility to lend."""
    if delegator_id == proposal.edited_by_id:
        return True
    membership = TenantMembership.objects.filter(tenant_id=proposal.tenant_id, user_id=delegator_id).first()
    if membership is None or membership.role == TenantMembership.Role.COMPLIANCE:
        return True
    return (
        bool(proposal.principal_id)
        and membership.principal_id == proposal.principal_id
        and not proposal.requirements.get("self_approval")
    )


def delegated_groups(proposal, delegate, groups: dict, at=None) -> tuple["User | None", set[str]]:
    """(delegator, the threshold slugs lent) for the first active delegation to `delegate` whose
    delegator could fill a slot of this proposal; (None, set()) when none lends anything."""
    ids = {group.id: slug for slug, group in groups.items()}
    for delegation in active_delegations(proposal.tenant_id, delegate.pk, at):
        if delegation.delegator_id == delegate.pk or _lends_nothing(proposal, delegation.delegator_id):
            continue
        lent = {
            ids[group_id]
            for group_id in GroupMembership.objects.filter(
                user_id=delegation.delegator_id, group_id__in=ids
            ).values_list("group_id", flat=True)
        }
        if lent:
            return delegation.delegator, lent
    return None, set()


def lent_slugs_for_votes(proposal, votes, groups: dict) -> dict[int, set[str]]:
    """For the quorum count: vote id -> the slugs it may fill through the delegation it was cast under
    (the delegator's groups now, while the delegator could still lend them; the period is checked when
    the vote is cast)."""
    ids = {group.id: slug for slug, group in groups.items()}
    lent: dict[int, set[str]] = {}
    for vote in votes:
        if vote.on_behalf_of_id is None or _lends_nothing(proposal, vote.on_behalf_of_id):
            continue
        lent[vote.id] = {
            ids[group_id]
            for group_id in GroupMembership.objects.filter(
                user_id=vote.on_behalf_of_id, group_id__in=ids
            ).values_list("group_id", flat=True)
        }
    return lent


def voices_cast(proposal, user, on_behalf_of) -> set[int]:
    """The voters of the votes already cast in this person's voice, in one query: their own vote, one
    cast on their behalf, and, when they would vote for a delegator, the delegator's own and one cast
    on the delegator's behalf. Empty when the person may still vote."""
    voice = Q(voter=user) | Q(on_behalf_of=user)
    if on_behalf_of is not None:
        voice |= Q(voter=on_behalf_of) | Q(on_behalf_of=on_behalf_of)
    return set(proposal.votes.filter(voice).values_list("voter_id", flat=True))


def current_delegations(tenant_ids) -> list[Delegation]:
    """The delegations active now in these tenants (what their admins see), soonest ending first."""
    now = timezone.now()
    return list(
        Delegation.objects.filter(
            tenant_id__in=tenant_ids, starts_at__lte=now, ends_at__gt=now, ended_at=None
        )
        .select_related("delegator", "delegate", "tenant")
        .order_by("ends_at", "id")
    )


@dataclass(frozen=True)
class Capacity:
    """What one person may decide on one proposal now: the threshold slugs, and the delegator whose
    eligibility they use (None when they vote as themselves)."""

    slugs: frozenset = field(default_factory=frozenset)
    on_behalf_of: "User | None" = None


def capacity(proposal, user, groups: dict, own: set[str]) -> Capacity:
    """A member votes as themselves in their own groups; a stand-in the escalation added fills any slot;
    someone in neither may use a delegation, on its delegator's behalf."""
    if StandIn.objects.filter(proposal=proposal, user=user).exists():
        return Capacity(frozenset(groups))
    if own:
        return Capacity(frozenset(own))
    delegator, lent = delegated_groups(proposal, user, groups)
    return Capacity(frozenset(lent), delegator)


def delegated_group_slugs(user) -> list[tuple[int, str]]:
    """(tenant id, group slug) of every group lent to this person by a delegation active now. Every
    queue asks; few people hold a delegation: the delegations are read first (one small query), their
    delegators' groups only when there are any."""
    now = timezone.now()
    active = list(
        Delegation.objects.filter(delegate=user, starts_at__lte=now, ends_at__gt=now)
        .exclude(ended_at__lte=now)
        .values_list("delegator_id", "tenant_id")
    )
    if not active:
        return []
    # Each delegation lends its delegator's groups of its own tenant only: (delegator, tenant) pairs, not
    # every delegator's groups in every tenant some delegation names.
    lent = Q(pk__in=[])
    for delegator_id, tenant_id in active:
        lent |= Q(user_id=delegator_id, group__tenant_id=tenant_id)
    return list(GroupMembership.objects.filter(lent).values_list("group__tenant_id", "group__slug"))
