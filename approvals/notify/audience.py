"""Who a message about a proposal goes to (read-only)."""

from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils import timezone

from approvals.models.notifications import Delegation
from approvals.selectors import ineligibility
from tenants.models import TenantMembership


def waiting_reviewers(proposal) -> list:
    """The people who could still decide this proposal now and have not: members of its groups, its
    stand-ins and the delegates of its members, each passing the vote's own eligibility check."""
    slugs = [t["group"] for t in proposal.requirements.get("thresholds", [])]
    in_groups = Q(approver_groups__tenant_id=proposal.tenant_id, approver_groups__slug__in=slugs)
    stand_in = Q(pk__in=proposal.stand_ins.values("user_id"))
    people = (
        get_user_model()
        .objects.filter(is_active=True, tenant_memberships__tenant_id=proposal.tenant_id)
        .filter(in_groups | stand_in | Q(pk__in=_delegates(proposal, slugs)))
        .distinct()
        .order_by("username")
    )
    # A person's voice is taken by their own vote or one cast on their behalf (standins.voices_cast's
    # rule for someone voting as themselves), read here once for everyone.
    spoken_for = {
        person_id
        for pair in proposal.votes.values_list("voter_id", "on_behalf_of_id")
        for person_id in pair
        if person_id is not None
    }
    return [
        person for person in people if person.pk not in spoken_for and ineligibility(proposal, person) is None
    ]


def _delegates(proposal, slugs):
    now = timezone.now()
    return (
        Delegation.objects.filter(
            tenant_id=proposal.tenant_id,
            starts_at__lte=now,
            ends_at__gt=now,
            delegator__approver_groups__tenant_id=proposal.tenant_id,
            delegator__approver_groups__slug__in=slugs,
        )
        .exclude(ended_at__lte=now)
        .values("delegate_id")
    )


def tenant_admins(tenant_id) -> list:
    return [
        m.user
        for m in TenantMembership.objects.filter(
            tenant_id=tenant_id, role=TenantMembership.Role.ADMIN, user__is_active=True
        )
        .exclude(user__email="")
        .select_related("user")
        .order_by("user__username")
    ]
