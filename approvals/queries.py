"""Who sees what, as querysets: the queue (what a person can decide now) and the watching list (everything
else in their tenants), their filters and the row data the lists show. Read only; shared by the pages
(approvals/pages.py) and through them by the views and the WebSocket consumers.
"""

from collections import defaultdict
from dataclasses import dataclass, field

from django.db import NotSupportedError
from django.db.models import (
    BooleanField,
    Case,
    Count,
    Exists,
    F,
    Func,
    IntegerField,
    OuterRef,
    Prefetch,
    Q,
    Subquery,
    When,
)
from django.db.models.functions import Coalesce
from django.utils import timezone

from approvals.models import PolicyVersion, Proposal, TenantMembership, Vote
from approvals.states import State


class ThresholdNamesAnyGroup(Func):
    """True when a proposal's requirements name one of `slugs` in a threshold. Exact on both databases,
    whatever the number of thresholds (JSON containment has no SQLite form in Django)."""

    output_field = BooleanField()

    def __init__(self, slugs):
        super().__init__(F("requirements"))
        self.slugs = sorted(slugs)

    def _compile(self, compiler, connection, template):
        column, params = compiler.compile(self.source_expressions[0])
        marks = ", ".join(["%s"] * len(self.slugs))
        return template.format(column=column, marks=marks), (*params, *self.slugs)

    def as_sqlite(self, compiler, connection, **extra):
        return self._compile(
            compiler,
            connection,
            "EXISTS (SELECT 1 FROM json_each({column}, '$.thresholds') AS t "
            "WHERE json_extract(t.value, '$.group') IN ({marks}))",
        )

    def as_postgresql(self, compiler, connection, **extra):
        return self._compile(
            compiler,
            connection,
            "EXISTS (SELECT 1 FROM jsonb_array_elements({column} -> 'thresholds') AS t(item) "
            "WHERE t.item ->> 'group' IN ({marks}))",
        )

    def as_sql(self, compiler, connection, **extra):
        raise NotSupportedError("the reviewer queue supports SQLite and PostgreSQL")


@dataclass
class ReviewerScope:
    """A person's tenants and groups, read once per page (two queries)."""

    user: object
    memberships: list = field(default_factory=list)
    group_slugs: dict = field(default_factory=dict)  # tenant id -> {group slug}

    @classmethod
    def of(cls, user) -> "ReviewerScope":
        memberships = list(
            TenantMembership.objects.filter(user=user).select_related("tenant").order_by("tenant__name")
        )
        slugs = defaultdict(set)
        for tenant_id, slug in user.approver_groups.values_list("tenant_id", "slug"):
            slugs[tenant_id].add(slug)
        return cls(user=user, memberships=memberships, group_slugs=dict(slugs))

    @property
    def tenant_ids(self) -> list[int]:
        return [m.tenant_id for m in self.memberships]

    @property
    def votes(self) -> bool:
        return any(m.role != TenantMembership.Role.COMPLIANCE for m in self.memberships)

    def eligible(self) -> Q:
        """The SQL form of services.ineligibility() for many proposals at once."""
        clauses = Q(pk__in=[])
        for membership in self.memberships:
            slugs = self.group_slugs.get(membership.tenant_id)
            if membership.role == TenantMembership.Role.COMPLIANCE or not slugs:
                continue
            clause = Q(tenant_id=membership.tenant_id) & Q(ThresholdNamesAnyGroup(slugs))
            if membership.principal_id:
                clause &= ~Q(principal_id=membership.principal_id) | Q(requirements__self_approval=True)
            clauses |= clause
        return clauses


def eligible_proposals(scope: ReviewerScope):
    """What this person can decide now: waiting, not expired by the clock, they are eligible, not the
    principal, not the edit's author, and they have not voted on it yet."""
    voted = Vote.objects.filter(proposal=OuterRef("pk"), voter=scope.user)
    return (
        Proposal.objects.filter(scope.eligible(), state=State.AWAITING_REVIEW, expires_at__gt=timezone.now())
        .exclude(edited_by=scope.user)
        .exclude(Exists(voted))
    )


def watching_proposals(scope: ReviewerScope):
    return Proposal.objects.filter(tenant_id__in=scope.tenant_ids).exclude(
        pk__in=eligible_proposals(scope).values("pk")
    )


# Ties in expiry sort the riskier proposal first; an unrated one last.
RISK_RANK = Case(When(risk="high", then=0), When(risk="medium", then=1), When(risk="low", then=2), default=3)


def with_row_data(queryset):
    approvals = (
        Vote.objects.filter(proposal=OuterRef("pk"), verdict=Vote.Verdict.APPROVE)
        .values("proposal")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return (
        queryset.select_related("agent", "tenant")
        .annotate(
            approval_count=Coalesce(Subquery(approvals, output_field=IntegerField()), 0), risk_rank=RISK_RANK
        )
        .prefetch_related(
            Prefetch(
                "policy_versions",
                queryset=PolicyVersion.objects.select_related("policy").order_by("policy__slug"),
            )
        )
    )


def apply_filters(queryset, filters: dict):
    if "tenant" in filters:
        queryset = queryset.filter(tenant__slug=filters["tenant"])
    if "agent" in filters:
        queryset = queryset.filter(agent__slug=filters["agent"])
    if "risk" in filters:
        queryset = queryset.filter(risk=filters["risk"])
    if "state" in filters:
        queryset = queryset.filter(state=filters["state"])
    if "policy" in filters:
        pinned = Proposal.policy_versions.through.objects.filter(
            proposal_id=OuterRef("pk"), policyversion__policy__slug=filters["policy"]
        )
        queryset = queryset.filter(Exists(pinned))
    return queryset
