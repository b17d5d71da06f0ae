"""Who sees what, as querysets: the queue (what a person can decide now) and the watching list (everything
else in their tenants), their filters and the row data the lists show. Read only; shared by the pages
(approvals/web/pages.py) and through them by the views and the WebSocket consumers.
"""

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db import NotSupportedError
from django.db.models import (
    BooleanField,
    Count,
    Exists,
    F,
    Func,
    IntegerField,
    OuterRef,
    Q,
    Subquery,
)
from django.db.models.functions import Coalesce
from django.utils import timezone

from approvals.models import Proposal, StandIn, Vote
from approvals.policy import history
from approvals.selectors.standins import delegated_group_slugs
from approvals.states import OPEN_FOR_VOTES
from lib import base64url
from tenants.models import TenantMembership
from tenants.queries import memberships_of

if TYPE_CHECKING:
    from django.contrib.auth.models import User


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

    def as_sql(self, compiler, connection, *args, **extra):
        raise NotSupportedError("the reviewer queue supports SQLite and PostgreSQL")


@dataclass
class ReviewerScope:
    """A person's tenants and groups, read once per page (four queries: memberships, groups, groups lent
    by an active delegation, requests an escalation added them to)."""

    user: "User"
    memberships: list = field(default_factory=list)
    group_slugs: dict = field(default_factory=dict)  # tenant id -> {group slug}
    stand_ins: dict = field(default_factory=dict)  # tenant id -> [proposal ids the escalation added them to]

    @classmethod
    def of(cls, user) -> "ReviewerScope":
        memberships = list(memberships_of(user).select_related("tenant").order_by("tenant__name"))
        slugs = defaultdict(set)
        for tenant_id, slug in user.approver_groups.values_list("tenant_id", "slug"):
            slugs[tenant_id].add(slug)
        # Out of office: a delegate's queue also holds what the delegators' groups decide (the vote
        # checks the rest: separation of duties, the period, one voice).
        for tenant_id, slug in delegated_group_slugs(user):
            slugs[tenant_id].add(slug)
        stand_ins = defaultdict(list)
        for tenant_id, proposal_id in StandIn.objects.filter(
            user=user, proposal__state__in=OPEN_FOR_VOTES
        ).values_list("proposal__tenant_id", "proposal_id")[:1000]:
            stand_ins[tenant_id].append(proposal_id)
        return cls(user=user, memberships=memberships, group_slugs=dict(slugs), stand_ins=dict(stand_ins))

    @property
    def tenant_ids(self) -> list[int]:
        return [m.tenant_id for m in self.memberships]

    @property
    def votes(self) -> bool:
        return any(m.role != TenantMembership.Role.COMPLIANCE for m in self.memberships)

    def eligible(self) -> Q:
        """The SQL form of selectors.ineligibility() for many proposals at once."""
        clauses = Q(pk__in=[])
        for membership in self.memberships:
            if membership.role == TenantMembership.Role.COMPLIANCE:
                continue
            slugs = self.group_slugs.get(membership.tenant_id)
            stood_in = self.stand_ins.get(membership.tenant_id)
            if not slugs and not stood_in:
                continue
            clause = Q(pk__in=[])
            if slugs:
                clause |= Q(tenant_id=membership.tenant_id) & Q(ThresholdNamesAnyGroup(slugs))
            if stood_in:  # requests the escalation step added this person to
                clause |= Q(tenant_id=membership.tenant_id, pk__in=stood_in)
            if membership.principal_id:
                clause &= ~Q(principal_id=membership.principal_id) | Q(requirements__self_approval=True)
            clauses |= clause
        return clauses


def _decidable(scope: ReviewerScope) -> Q:
    """What this person can decide now: waiting, not expired by the clock, they are eligible, not the
    principal, not the edit's author, and they have not voted on it yet. A condition on the row itself,
    so the queue filters by it and the watching list by its negation (no NOT IN over the whole queue)."""
    voted = Vote.objects.filter(proposal=OuterRef("pk"), voter=scope.user)
    return (
        scope.eligible()
        & Q(state__in=OPEN_FOR_VOTES, expires_at__gt=timezone.now())
        & ~Q(edited_by=scope.user)
        & ~Q(Exists(voted))
    )


def eligible_proposals(scope: ReviewerScope):
    return Proposal.objects.filter(_decidable(scope))


def watching_proposals(scope: ReviewerScope):
    return Proposal.objects.filter(tenant_id__in=scope.tenant_ids).exclude(_decidable(scope))


# What the agent wrote at length that no list shows (the page of one proposal does): not read for a list
# page's rows. A list that came to show one would read it row by row, which the constant number of
# queries of tests/approvals/test_queue_queries.py would catch.
NOT_IN_LISTS = ("action_canonical", "diff", "evidence")


def with_row_data(queryset):
    """The list's rows with their agent, tenant and approvals so far (the policies they pinned are read
    for the page's rows by `pinned_policy_refs`)."""
    approvals = (
        Vote.objects.filter(proposal=OuterRef("pk"), verdict=Vote.Verdict.APPROVE)
        .values("proposal")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return (
        queryset.select_related("agent", "tenant")
        .defer(*NOT_IN_LISTS)
        .annotate(approval_count=Coalesce(Subquery(approvals, output_field=IntegerField()), 0))
    )


def pinned_policy_refs(proposals) -> dict:
    """proposal id -> the policy versions it pinned, as "slug@version" in the order of their slugs: one
    query of three columns for the whole page. (A prefetch of the versions made a model and a queryset
    per row, which cost more than the page's query itself.)"""
    pins = (
        Proposal.policy_versions.through.objects.filter(proposal_id__in=[p.pk for p in proposals])
        .order_by("policyversion__policy__slug", "policyversion__version")
        .values_list("proposal_id", "policyversion__policy__slug", "policyversion__version")
    )
    refs = defaultdict(list)
    for proposal_id, slug, version in pins:
        refs[proposal_id].append(f"{slug}@{version}")
    return refs


def apply_filters(queryset, filters: dict):
    if "q" in filters:
        # The target as history keys it (normalized: "order_id=1182" finds "order:1182"), the tool, or the
        # agent's name or slug.
        text = filters["q"]
        normalized = history.target_value(text)
        queryset = queryset.filter(
            Q(target_key__icontains=text)
            | Q(target_key__icontains=normalized)
            | Q(target_key__icontains=history.target_identity({"target": text}))
            | Q(tool__icontains=text)
            | Q(agent__name__icontains=text)
            | Q(agent__slug__icontains=text)
        )
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


# --------------------------------------------------------------------------------------------------
# Keyset pagination: a page is "the rows after this one in the list's order", so reading page 400 costs
# what page 1 costs (no OFFSET to skip over), and the index that serves the order serves the page.

# The lists count at most this many rows: above it they say "1,000+" instead of counting everything.
COUNT_CAP = 1000


def rows_after(order: tuple[str, ...], values: list) -> Q:
    """Rows strictly after `values` in `order` (field names, "-" for descending): the lexicographic
    comparison (a > x) or (a = x and b > y) or ..., which needs no row-value syntax."""
    after = Q(pk__in=[])
    equal = Q()
    for name, value in zip(order, values, strict=True):
        field = name.lstrip("-")
        step = Q(**{f"{field}__{'lt' if name.startswith('-') else 'gt'}": value})
        after |= equal & step
        equal &= Q(**{field: value})
    return after


def encode_cursor(row, order: tuple[str, ...]) -> str:
    """The position of `row` in `order` as an opaque URL-safe token."""
    values = [getattr(row, name.lstrip("-")) for name in order]
    raw = json.dumps([v.isoformat() if isinstance(v, datetime) else str(v) for v in values])
    return base64url.encode(raw.encode())


def _field(name: str):
    name = name.lstrip("-")
    return Proposal._meta.pk if name == "pk" else Proposal._meta.get_field(name)


def decode_cursor(token: str, order: tuple[str, ...]) -> list | None:
    """The values of a cursor, or None when it is not one of ours (the list then starts at the top)."""
    try:
        raw = base64url.decode(token)
        values = json.loads(raw)
        if not isinstance(values, list) or len(values) != len(order):
            return None
        return [_field(name).to_python(value) for name, value in zip(order, values, strict=True)]
    except (ValueError, TypeError, ValidationError, FieldDoesNotExist):
        return None


@dataclass
class KeysetPage:
    rows: list
    next_cursor: str  # "" on the last page


def keyset_page(queryset, order: tuple[str, ...], cursor: str, size: int) -> KeysetPage:
    """One page of `queryset` in `order` (which must end with a unique field) after `cursor`: one
    query, size + 1 rows, the extra one only telling whether there is a next page."""
    values = decode_cursor(cursor, order) if cursor else None
    if values is not None:
        queryset = queryset.filter(rows_after(order, values))
    rows = list(queryset.order_by(*order)[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    return KeysetPage(rows=rows, next_cursor=encode_cursor(rows[-1], order) if more else "")


def capped_count(queryset, cap: int = COUNT_CAP) -> tuple[int, bool]:
    """How many rows, counting at most cap + 1 (a COUNT over a LIMIT subquery): (count, capped)."""
    count = queryset.order_by()[: cap + 1].count()
    return min(count, cap), count > cap


def targets_with_duplicates(proposals) -> set:
    """The ids among `proposals` with a likely duplicate: another proposal on the same target, outside
    their own task, that was done, may be done or waits for people (history.DUPLICATE_STATES), within
    the page's history window. One query for the whole page."""
    keyed = {p.pk: p for p in proposals if p.target_key}
    if not keyed:
        return set()
    others = Proposal.objects.filter(
        tenant_id__in={p.tenant_id for p in keyed.values()},
        target_key__in={p.target_key for p in keyed.values()},
        state__in=history.DUPLICATE_STATES,
        created_at__gte=timezone.now() - history.PAGE_WINDOW,
    ).values_list("pk", "tenant_id", "target_key", "agent_id", "task_id")
    by_target = defaultdict(list)
    # Enough rows per page to find each row's duplicate: a row needs one other outside its own task.
    for other_pk, tenant_id, key, agent_id, task_id in others[:DUPLICATE_SCAN]:
        by_target[tenant_id, key].append((other_pk, agent_id, task_id))
    return {
        proposal.pk
        for proposal in keyed.values()
        if any(
            other_pk != proposal.pk and (agent_id, task_id) != (proposal.agent_id, proposal.task_id)
            for other_pk, agent_id, task_id in by_target[proposal.tenant_id, proposal.target_key]
        )
    }


DUPLICATE_SCAN = 2000
