"""Who may see and decide a proposal; which agents intake throttled lately."""

from datetime import datetime, timedelta
from functools import cached_property

from django.db.models import F

from approvals.models import Proposal, QuotaState
from approvals.selectors import standins
from lib.errors import NotFound
from tenants.models import ApproverGroup, GroupMembership, TenantMembership
from tenants.queries import memberships_of


def tenant_role(user, tenant_id) -> str | None:
    membership = memberships_of(user).filter(tenant_id=tenant_id).only("role").first()
    return membership.role if membership else None


# What the proposal's page shows of the rows beside it, joined into the page's read of the proposal (one
# statement, not three): its follow-up (the "cannot reach its quorum" notice) and its signed decision.
# approvals/web/pages.py takes them from there when they were joined. (A proposal row joined costs
# more to build than its own query: the predecessor is read when there is one, the successor apart.)
PAGE_JOINS = ("follow_up", "decision")


def proposal_for_user(proposal_id, user, *, for_page: bool = False) -> Proposal:
    """The proposal, if the user belongs to its tenant; NotFound otherwise (outsiders learn nothing).
    The membership that lets them in comes with it (one per tenant and person): see viewer_slots.
    `for_page`: with the rows of PAGE_JOINS."""
    proposal = (
        Proposal.objects.select_related("agent", "tenant", *(PAGE_JOINS if for_page else ()))
        .filter(pk=proposal_id, tenant__memberships__user=user)
        # F() over the relation the filter joined reuses that join: the person's own membership row.
        .annotate(
            viewer_id=F("tenant__memberships__user_id"),
            viewer_role=F("tenant__memberships__role"),
            viewer_principal_id=F("tenant__memberships__principal_id"),
        )
        .first()
    )
    if proposal is None:
        raise NotFound("not_found", "no such proposal")
    return proposal


def viewer_slots(proposal: Proposal, user, groups: dict[str, ApproverGroup] | None = None) -> "VoterSlots":
    """The VoterSlots of a person reading the proposal's page, with their role and whether they are its
    principal taken from the membership proposal_for_user read with the proposal (`viewer_*`), when it
    read it for this person; read again otherwise."""
    if getattr(proposal, "viewer_id", None) != user.pk:
        return VoterSlots(proposal, user, groups)
    return VoterSlots(
        proposal,
        user,
        groups,
        role=getattr(proposal, "viewer_role"),  # noqa: B009 (an annotation, unknown to the model's type)
        is_the_principal=getattr(proposal, "viewer_principal_id") == proposal.principal_id,  # noqa: B009
    )


def lock_proposal_for(proposal_id, actor, *, roles=None) -> Proposal:
    """The proposal row locked for this transaction, if `actor` belongs to its tenant (with one of
    `roles`, when given); NotFound otherwise, so outsiders learn nothing. Call inside transaction.atomic."""
    return lock_proposal_with_role(proposal_id, actor, roles=roles)[0]


def lock_proposal_with_role(proposal_id, actor, *, roles=None) -> tuple[Proposal, str]:
    """lock_proposal_for, with the actor's role in the proposal's tenant that it read (a vote's
    eligibility asks for it again: VoterSlots(role=...))."""
    proposal = (
        Proposal.objects.select_for_update(of=("self",))
        .select_related("agent", "tenant")
        .filter(pk=proposal_id)
        .first()
    )
    role = tenant_role(actor, proposal.tenant_id) if proposal is not None else None
    if proposal is None or role is None or (roles is not None and role not in roles):
        raise NotFound("not_found", "no such proposal")
    return proposal, role


def threshold_groups(proposal: Proposal, requirements: dict | None = None) -> dict[str, ApproverGroup]:
    requirements = proposal.requirements if requirements is None else requirements
    slugs = [t["group"] for t in requirements.get("thresholds", [])]
    return {g.slug: g for g in ApproverGroup.objects.filter(tenant_id=proposal.tenant_id, slug__in=slugs)}


class VoterSlots:
    """A proposal's threshold groups and the slots one person may fill in them, each read once when first
    asked for: a vote asks three times (may they decide, is their voice taken, which groups their vote
    counts in), and read once the three answers also agree with each other (read three times, a
    membership or delegation committed in between could make them differ)."""

    def __init__(
        self,
        proposal: Proposal,
        user,
        groups: dict[str, ApproverGroup] | None = None,
        *,
        role=None,
        is_the_principal: bool | None = None,
    ):
        self.proposal, self.user = proposal, user
        if groups is not None:  # read already by the caller (a page shows them)
            self.groups = groups
        # Read already with the proposal: with its lock (lock_proposal_with_role, the role), or with the
        # page's read (proposal_for_user, the role and the principal id of the person's membership).
        if role is not None:
            self.role = role
        if is_the_principal is not None:
            self.is_the_principal = is_the_principal

    @cached_property
    def role(self) -> str | None:
        """The person's role in the proposal's tenant (None: not a member)."""
        return tenant_role(self.user, self.proposal.tenant_id)

    @cached_property
    def is_the_principal(self) -> bool:
        """Whether the person is the one the proposal's action is for (their membership's principal id)."""
        return is_principal(self.proposal, self.user)

    @cached_property
    def groups(self) -> dict[str, ApproverGroup]:
        return threshold_groups(self.proposal)

    @cached_property
    def capacity(self) -> standins.Capacity:
        return capacity_for(self.proposal, self.user, self.groups)

    def own_groups(self) -> list[ApproverGroup]:
        """The threshold groups this person may fill a slot of right now: their own, every one if the
        escalation step added them, and those a delegation lends them (approvals/selectors/standins.py)."""
        return [g for g in self.groups.values() if g.slug in self.capacity.slugs]


def capacity_for(
    proposal: Proposal, user, groups: dict[str, ApproverGroup] | None = None
) -> standins.Capacity:
    """The slots this person may fill and on whose behalf (see standins.capacity)."""
    groups = groups if groups is not None else threshold_groups(proposal)
    ids = set(
        GroupMembership.objects.filter(user=user, group__in=groups.values()).values_list(
            "group_id", flat=True
        )
    )
    own = {g.slug for g in groups.values() if g.id in ids}
    return standins.capacity(proposal, user, groups, own)


def is_principal(proposal: Proposal, user) -> bool:
    return TenantMembership.objects.filter(
        tenant_id=proposal.tenant_id, user=user, principal_id=proposal.principal_id
    ).exists()


def ineligibility(proposal: Proposal, user, slots: VoterSlots | None = None) -> tuple[str, str] | None:
    """Why this user may not decide this proposal now, as (code, message); None if they may. `slots`:
    the person's, when the caller reads them too."""
    slots = slots or VoterSlots(proposal, user)
    return ineligibility_from(
        proposal,
        user.id,
        slots.role,
        is_principal=lambda: slots.is_the_principal,
        in_a_group=lambda: bool(slots.own_groups()),
    )


def ineligibility_from(
    proposal: Proposal, user_id, role: str | None, *, is_principal, in_a_group
) -> tuple[str, str] | None:
    """The rule of ineligibility() over facts read elsewhere (the socket fan-out reads them for every open
    page at once): the person's role in the tenant, and callables answering whether they are the
    proposal's principal and whether they are in a group it needs (asked only when the rule gets there)."""
    if role is None:
        return "not_found", "no such proposal"
    if role == TenantMembership.Role.COMPLIANCE:
        return "not_eligible", "compliance staff read and export; they do not vote"
    if is_principal() and not proposal.requirements.get("self_approval"):
        return "self_approval", "you are the person this action is for; someone else must decide it"
    if proposal.edited_by_id == user_id:
        return "edit_author", "you edited this proposal; someone else must decide it"
    if not in_a_group():
        return "not_eligible", "you are not a member of a group this proposal needs"
    return None


# How long the queue tells a tenant's admins that an agent was throttled, after its last refusal.
THROTTLE_SHOWN_FOR = timedelta(hours=1)


def throttled_agents(tenant_ids, now: datetime) -> list[QuotaState]:
    """The agents of these tenants that intake refused over a quota in the last hour, the latest first,
    with their agent: when the window began, by which limit, how many it refused (services/quotas.py)."""
    return list(
        QuotaState.objects.filter(
            tenant_id__in=tenant_ids, agent__isnull=False, last_refused_at__gte=now - THROTTLE_SHOWN_FOR
        )
        .select_related("agent")
        .order_by("-last_refused_at")[:20]
    )
