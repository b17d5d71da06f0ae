"""What a proposal's page shows everyone now, and what it shows each audience, read and rendered once.

An audience is the people who see the same "You:" line and decision bar: the same controls (vote,
revoke, read only, and why not), the same groups they decide for, the same vote of their own. Both the
process that committed a change (broadcast.py, for every member of the tenant) and a Daphne process
re-reading for its sockets (fanout.py, for their people) build one PageView per event.
"""

import functools
from collections import defaultdict
from dataclasses import dataclass

from django.template.loader import render_to_string

from approvals.models import Proposal, Vote
from approvals.selectors import ineligibility_from, threshold_groups
from approvals.selectors.standins import delegated_groups, stand_in_users
from approvals.services import lifecycle
from approvals.web.pages import consequence_label, decision_mode_from, live_context, may_revoke_from, my_vote
from tenants.models import GroupMembership, TenantMembership

# Rendered once per update for everyone, and once per audience; the decision panel per socket.
SHARED_PARTIALS = ("live", "consequence_heading", "successor")
AUDIENCE_PARTIALS = ("you", "decision_bar")


@dataclass(frozen=True)
class Audience:
    """One person's "You:" line and decision bar (html, shared by everyone with the same key), and what
    their decision panel needs: its controls (mode) and why they may not decide."""

    key: tuple
    html: str
    mode: tuple
    why_not: tuple[str, str] | None
    vote: Vote | None

    def controls(self, proposal: Proposal) -> tuple[str, str]:
        """What decides whether a socket's decision panel must be sent again."""
        return (self.mode[0], proposal.state)


class PageView:
    """The page of `proposal` for these members of its tenant ({user id: membership}), read once."""

    def __init__(self, proposal: Proposal, memberships: dict[int, TenantMembership]):
        self.proposal, self.memberships = proposal, memberships
        self.groups = threshold_groups(proposal)
        in_groups = defaultdict(set)
        for user_id, group_id in GroupMembership.objects.filter(
            group__in=self.groups.values(), user_id__in=set(memberships)
        ).values_list("user_id", "group_id"):
            in_groups[user_id].add(group_id)
        self.in_groups = in_groups
        self._standing_in = functools.cache(lambda: stand_in_users(proposal))
        self.live = live_context(proposal, self.groups)
        shared = {
            **self.live,
            "successor": Proposal.objects.filter(supersedes=proposal).only("id", "state", "summary").first(),
            "oob": True,
        }
        self.html = "".join(
            render_to_string(f"approvals/detail.html#{name}", shared) for name in SHARED_PARTIALS
        )
        self._closed_reason = functools.cache(lambda: lifecycle.closed_reason(proposal))
        self._label = consequence_label(proposal)
        self._deciding: dict[int, frozenset] = {}
        self._rendered: dict[tuple, str] = {}

    def deciding_groups(self, user_id: int) -> frozenset:
        """As the page decides (selectors.capacity_for): a person the escalation step added fills any
        slot, a delegate the slots their delegator lends. Asked only where the eligibility rule gets to
        groups, so compliance staff and the principal cost no query."""
        if user_id not in self._deciding:
            if user_id in self._standing_in():
                found = frozenset(group.id for group in self.groups.values())
            elif self.in_groups[user_id]:
                found = frozenset(self.in_groups[user_id])
            else:
                _, lent = delegated_groups(self.proposal, _Person(user_id), self.groups)
                found = frozenset(self.groups[slug].id for slug in lent)
            self._deciding[user_id] = found
        return self._deciding[user_id]

    def audience(self, user_id: int) -> Audience:
        proposal, membership = self.proposal, self.memberships[user_id]
        why_not = ineligibility_from(
            proposal,
            user_id,
            membership.role,
            is_principal=functools.partial(_is_principal, proposal, membership),
            in_a_group=lambda: bool(self.deciding_groups(user_id)),
        )
        vote = my_vote(self.live, user_id)
        mode = decision_mode_from(
            proposal,
            user_id,
            self.live,
            why_not,
            # services.decisions.may_revoke's rule, over the votes the page read anyway
            may_revoke=functools.partial(may_revoke_from, membership.role, self.live, user_id),
            role=functools.partial(getattr, membership, "role"),
            closed_reason=self._closed_reason,
        )
        deciding = self.deciding_groups(user_id) if why_not is None else frozenset()
        my_groups = [g for g in self.groups.values() if g.id in deciding]
        key = (mode, tuple(g.id for g in my_groups), vote.verdict if vote else None)
        if key not in self._rendered:
            context = {
                "proposal": proposal,
                "progress": self.live["progress"],
                "why": {"my_groups": my_groups},
                "decision_panel": {
                    "mode": mode[0],
                    "why_not": mode[1],
                    "my_vote": vote,
                    "consequence_label": self._label,  # the bar's buttons name the amount, as the panel's do
                },
                "oob": True,
            }
            self._rendered[key] = "".join(
                render_to_string(f"approvals/detail.html#{name}", context) for name in AUDIENCE_PARTIALS
            )
        return Audience(key=key, html=self._rendered[key], mode=mode, why_not=why_not, vote=vote)


@dataclass(frozen=True)
class _Person:
    """What delegated_groups reads of a person: their id."""

    pk: int


def _is_principal(proposal: Proposal, membership: TenantMembership) -> bool:
    return (
        membership.principal_id == proposal.principal_id
    )  # selectors.is_principal, one membership per tenant
