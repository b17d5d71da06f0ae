"""Counting the votes against a proposal's pinned requirements."""

from dataclasses import dataclass

from approvals.models import Proposal, Vote
from approvals.selectors import threshold_groups
from approvals.selectors.standins import lent_slugs_for_votes, stand_in_users
from tenants.models import ApproverGroup, GroupMembership, TenantMembership


@dataclass
class Quorum:
    required: list[dict]  # [{"group", "count"}]
    slots: dict[str, list[Vote]]  # group slug -> the approvals that fill it
    met: bool

    def missing(self) -> list[dict]:
        return [
            {"group": t["group"], "count": t["count"] - len(self.slots.get(t["group"], []))}
            for t in self.required
            if len(self.slots.get(t["group"], [])) < t["count"]
        ]


def _raise_for_reservation(required: list[dict], requirements: dict, approvals, memberships) -> None:
    """A policy may ask for a second approver when someone approves with a reservation: the first
    threshold the reserving person can fill needs one approval more."""
    if not requirements.get("reservation_second"):
        return
    for vote in approvals:
        if not vote.reservation:
            continue
        for threshold in required:
            if threshold["group"] in memberships.get(vote.voter_id, set()):
                threshold["count"] = int(threshold["count"]) + 1
                return


def count_quorum(
    proposal: Proposal, requirements: dict | None = None, *, groups: dict[str, ApproverGroup] | None = None
) -> Quorum:
    """Place each counting approval in at most one slot, using current group membership.

    A vote counts only while its voter is still a member of a group that needs them, is not the
    principal and did not author the edit. Placement is a bipartite matching (voters to group slots),
    so a person in two groups fills whichever slot completes the quorum, never both. `requirements`
    (default: the proposal's own) lets a policy change ask whether recorded votes meet new ones;
    `groups`: the proposal's threshold groups when the caller read them already (a vote did)."""
    requirements = proposal.requirements if requirements is None else requirements
    required = [dict(t) for t in requirements.get("thresholds", [])]
    if groups is None or requirements is not proposal.requirements:
        groups = threshold_groups(proposal, requirements)
    slug_of_group = {group.id: slug for slug, group in groups.items()}
    approvals = list(
        proposal.votes.filter(verdict=Vote.Verdict.APPROVE)
        .select_related("voter", "on_behalf_of")
        .order_by("created_at")
    )
    memberships: dict[int, set[str]] = {}
    for membership in GroupMembership.objects.filter(
        group__in=groups.values(), user__in=[v.voter for v in approvals]
    ):
        memberships.setdefault(membership.user_id, set()).add(slug_of_group[membership.group_id])
    principal_users = set(
        TenantMembership.objects.filter(
            tenant_id=proposal.tenant_id, principal_id=proposal.principal_id
        ).values_list("user_id", flat=True)
    )
    # Stand-ins the escalation added fill any slot; a delegate's vote fills its delegator's.
    stand_ins = stand_in_users(proposal)
    lent = lent_slugs_for_votes(proposal, approvals, groups)
    _raise_for_reservation(required, requirements, approvals, memberships)
    capacity = {t["group"]: int(t["count"]) for t in required}
    assignment: dict[int, str] = {}  # vote index -> group slug

    def candidates(index: int) -> list[str]:
        vote = approvals[index]
        if vote.voter_id == proposal.edited_by_id:
            return []
        if vote.voter_id in principal_users and not requirements.get("self_approval"):
            return []
        if vote.voter_id in stand_ins:
            return list(capacity)
        allowed = memberships.get(vote.voter_id, set()) | lent.get(vote.id, set())
        return [slug for slug in capacity if slug in allowed]

    def place(index: int, seen: set[str]) -> bool:
        for slug in candidates(index):
            if slug in seen:
                continue
            seen.add(slug)
            holders = [i for i, s in assignment.items() if s == slug]
            if len(holders) < capacity[slug]:
                assignment[index] = slug
                return True
            for holder in holders:
                if place_elsewhere(holder, seen):
                    assignment[index] = slug
                    return True
        return False

    def place_elsewhere(holder: int, seen: set[str]) -> bool:
        previous = assignment.pop(holder)
        if place(holder, seen):
            return True
        assignment[holder] = previous
        return False

    for index in range(len(approvals)):
        place(index, set())
    slots: dict[str, list[Vote]] = {}
    for index, slug in sorted(assignment.items()):
        slots.setdefault(slug, []).append(approvals[index])
    met = bool(required) and all(len(slots.get(t["group"], [])) >= int(t["count"]) for t in required)
    return Quorum(required=required, slots=slots, met=met)
