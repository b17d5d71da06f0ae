"""Is a proposal's quorum reachable? Asked at intake, so that a request nobody can decide is reported to
the tenant admins at once instead of expiring silently.

A person can fill a slot of a threshold group when they are an active user, a member of the group, a
reviewer or admin of the tenant (not compliance), not the proposal's principal (unless the policy allows
self-approval), not the author of its edit, not out of office (an active delegation *from* them: then
their delegate counts in their place, if the delegate could vote), and have a factor the policy accepts
(a passkey past its cool-off where it asks for one, else a one-time code device or a passkey). Each
person fills one slot (a matching, as the quorum count does). Read-only.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.apps import apps
from django.contrib.auth import get_user_model
from django.utils import timezone
from django_otp.models import Device

from accounts import passkeys
from approvals.models.notifications import Delegation
from approvals.policy.step_up import needs_passkey
from tenants.models import ApproverGroup, GroupMembership, TenantMembership

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@dataclass
class Reachability:
    required: list[dict]  # [{"group", "count"}]
    reachable: dict[str, int]  # group slug -> how many slots reachable people can fill
    people: dict[str, list[str]]  # group slug -> usernames who could fill a slot

    @property
    def met(self) -> bool:
        return all(self.reachable.get(t["group"], 0) >= int(t["count"]) for t in self.required)

    def missing(self) -> list[dict]:
        return [
            {"group": t["group"], "count": int(t["count"]), "reachable": self.reachable.get(t["group"], 0)}
            for t in self.required
            if self.reachable.get(t["group"], 0) < int(t["count"])
        ]


def factor_owners(user_ids, needs_passkey: bool) -> set:
    """Who among `user_ids` has a factor the policy accepts: a passkey, or where a code will do, any
    confirmed django-otp device (an authenticator app, backup codes) or a passkey. A few queries for
    everyone at once (intake asks this on its hot path)."""
    user_ids = set(user_ids)
    if needs_passkey:  # a passkey in its cool-off does not pass a passkey-only policy yet
        return passkeys.established_owners_among(user_ids)
    owners = set(passkeys.owners_among(user_ids))
    for model in apps.get_models():
        if issubclass(model, Device) and not model._meta.abstract:
            owners |= set(
                model._default_manager.filter(user_id__in=user_ids - owners, confirmed=True).values_list(
                    "user_id", flat=True
                )
            )
    return owners


def _can_vote(proposal, user, role_of: dict, principals: set, with_factor: set) -> bool:
    if not user.is_active or role_of.get(user.pk) in (None, TenantMembership.Role.COMPLIANCE):
        return False
    if user.pk in principals and not proposal.requirements.get("self_approval"):
        return False
    if user.pk == proposal.edited_by_id:
        return False
    return user.pk in with_factor


@dataclass
class GroupFacts:
    """What reachability reads of a tenant's people for a set of groups and a factor rule, the same for
    every proposal that asks for them: the members of the groups, everyone's role and principal id in
    the tenant, who is out of office and with whom, and who has a factor the rule accepts."""

    members: dict[int, set[str]]  # user id -> the slugs of the groups they are in
    role_of: dict[int, str]
    principal_of: dict[int, str]
    users: dict[int, "User"]
    lent: dict[int, "User"]  # an absent member's id -> their delegate
    with_factor: set[int]


def read_group_facts(tenant_id, slugs, passkey_asked: bool) -> GroupFacts:
    groups = {g.id: g.slug for g in ApproverGroup.objects.filter(tenant_id=tenant_id, slug__in=slugs)}
    members: dict[int, set[str]] = {}
    for membership in GroupMembership.objects.filter(group_id__in=groups):
        members.setdefault(membership.user_id, set()).add(groups[membership.group_id])
    role_of, principal_of = {}, {}
    for user_id, role, principal_id in TenantMembership.objects.filter(tenant_id=tenant_id).values_list(
        "user_id", "role", "principal_id"
    ):
        role_of[user_id], principal_of[user_id] = role, principal_id
    lent = {
        d.delegator_id: d.delegate for d in _delegations_from(tenant_id, members).select_related("delegate")
    }
    return GroupFacts(
        members=members,
        role_of=role_of,
        principal_of=principal_of,
        users={u.pk: u for u in get_user_model().objects.filter(pk__in=members)},
        lent=lent,
        with_factor=factor_owners({*members, *(d.pk for d in lent.values())}, passkey_asked),
    )


class ReachReader:
    """Reachability for many proposals (the worker's chasing step): their group facts read once per
    tenant, set of groups and factor rule, not once per proposal."""

    def __init__(self):
        self._facts: dict[tuple, GroupFacts] = {}

    def reachability(self, proposal) -> "Reachability":
        slugs = tuple(sorted({t["group"] for t in proposal.requirements.get("thresholds", [])}))
        key = (proposal.tenant_id, slugs, needs_passkey(proposal.requirements))
        if key not in self._facts:
            self._facts[key] = read_group_facts(*key)
        return reachability(proposal, self._facts[key])


def reachability(proposal, facts: GroupFacts) -> Reachability:
    """Who could fill the proposal's slots, from the facts of its groups (ReachReader reads them)."""
    required = [dict(t) for t in proposal.requirements.get("thresholds", [])]
    slugs = [t["group"] for t in required]
    principals = {user_id for user_id, p in facts.principal_of.items() if p == proposal.principal_id}
    # Who fills which slots: each present voter for their own groups, each absent one through a delegate.
    candidates: dict[str, set[str]] = {}  # a voter's username -> slugs they can fill
    for user_id, member_slugs in facts.members.items():
        user = facts.users[user_id]
        if user_id in principals and not proposal.requirements.get("self_approval"):
            continue
        voter = facts.lent.get(user_id, user)  # out of office: their delegate counts in their place
        if _can_vote(proposal, voter, facts.role_of, principals, facts.with_factor):
            candidates.setdefault(voter.get_username(), set()).update(member_slugs)
    return Reachability(
        required=required,
        reachable=_slots_filled(required, candidates),
        people={slug: sorted(u for u, s in candidates.items() if slug in s) for slug in slugs},
    )


def _delegations_from(tenant_id, delegator_ids):
    """The delegations active now from these people: while one is, its delegator is out of office."""
    now = timezone.now()
    return Delegation.objects.filter(
        tenant_id=tenant_id, delegator_id__in=delegator_ids, starts_at__lte=now, ends_at__gt=now
    ).exclude(ended_at__lte=now)


def _slots_filled(required: list[dict], candidates: dict[str, set[str]]) -> dict[str, int]:
    """How many slots of each group the candidates fill at most, one slot per person (a maximum
    matching by augmenting paths: small numbers of people, so the simple algorithm)."""
    slots = [(t["group"], n) for t in required for n in range(int(t["count"]))]
    holder: dict[int, str] = {}  # slot index -> username

    def place(person: str, seen: set[int]) -> bool:
        for index, (slug, _) in enumerate(slots):
            if slug not in candidates[person] or index in seen:
                continue
            seen.add(index)
            if index not in holder or place(holder[index], seen):
                holder[index] = person
                return True
        return False

    for person in sorted(candidates):
        place(person, set())
    filled: dict[str, int] = {}
    for index in holder:
        filled[slots[index][0]] = filled.get(slots[index][0], 0) + 1
    return filled
