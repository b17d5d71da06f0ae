"""Queue metrics computed from the audit log alone (one pass over a chain's proposal events).

Labels are policy versions (`slug@version`), tools and the tenant slug: never a person. Each proposal
submitted in the period is followed through its later events:

- its first outcome: approved or rejected (people), allowed or denied (policy), info_requested, expired,
  superseded or cancelled; rates are shares of the proposals that have one;
- time to decision: submission to the first human decision (approved, rejected, info_requested);
- supersedes, info requests, unknown outcomes (executions whose result was lost), revocations.

A rubber stamp: a policy version whose people approve more than 99% of what they decide, over at least
RUBBER_STAMP_MIN_SAMPLE human decisions. Why 300: with zero rejections in n decisions the 95% upper
bound on the true rejection rate is about 3/n (the "rule of three"); at n = 300 that bound is 1%, so
only from there on does "above 99% approved" say the reviewers reject less than 1 in 100, rather than
being what a healthy policy with a 1-2% rejection rate shows by chance on a small sample.
"""

import math
from collections import Counter
from collections.abc import Generator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from django.conf import settings

from audit.models import AuditEvent, Verb

RUBBER_STAMP_RATE = 0.99
HUMAN = ("approved", "rejected", "info_requested")
# The one list of first outcomes: the metrics page, its charts (audit.metrics.charts) and Prometheus read it.
FIRST_OUTCOMES = (
    "approved",
    "allowed",
    "rejected",
    "denied",
    "info_requested",
    "expired",
    "superseded",
    "cancelled",
)
TENANT_DEFAULT = "(tenant default)"
PAGE = 5000


def rubber_stamp_min_sample() -> int:
    return settings.AUDIT_RUBBER_STAMP_MIN_SAMPLE


@dataclass
class ProposalFacts:
    submitted_at: datetime
    tool: str = ""
    policies: tuple[str, ...] = ()
    first_outcome: str | None = None
    decided_at: datetime | None = None
    state: str = "proposed"
    was_unknown: bool = False
    approvals_cast: int = 0
    reservations: int = 0  # approvals given with a reservation (a dissent that did not block)
    under_grant: bool = False  # allowed at intake under a standing grant, not by policy alone


def percentile(values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile of a sorted list."""
    if not values:
        return None
    rank = max(1, math.ceil(fraction * len(values)))
    return values[rank - 1]


@dataclass
class Group:
    """Counts for one label (a policy version or a tool)."""

    label: str
    submitted: int = 0
    outcomes: Counter = field(default_factory=Counter)
    durations: list[float] = field(default_factory=list)
    approvals_cast: int = 0
    reservations: int = 0

    @property
    def reservation_rate(self) -> float | None:
        """Of the approvals people gave, how many came with a reservation."""
        return self.reservations / self.approvals_cast if self.approvals_cast else None

    @property
    def closed(self) -> int:
        return sum(self.outcomes.values())

    def rate(self, outcome: str) -> float | None:
        return self.outcomes[outcome] / self.closed if self.closed else None

    @property
    def human_decisions(self) -> int:
        return sum(self.outcomes[o] for o in HUMAN)

    @property
    def approval_rate(self) -> float | None:
        return self.outcomes["approved"] / self.human_decisions if self.human_decisions else None

    @property
    def rubber_stamp(self) -> bool:
        rate = self.approval_rate
        return (
            self.human_decisions >= rubber_stamp_min_sample()
            and rate is not None
            and rate > RUBBER_STAMP_RATE
        )

    @property
    def median_seconds(self) -> float | None:
        return percentile(sorted(self.durations), 0.5)

    @property
    def p95_seconds(self) -> float | None:
        return percentile(sorted(self.durations), 0.95)

    def rates(self) -> list[tuple[str, int, float]]:
        return [(o, self.outcomes[o], self.rate(o) or 0.0) for o in FIRST_OUTCOMES if self.outcomes[o]]


@dataclass
class Metrics:
    since: datetime | None
    until: datetime | None
    submitted: int = 0
    per_day: dict[date, Counter] = field(default_factory=dict)
    by_policy: dict[str, Group] = field(default_factory=dict)
    by_tool: dict[str, Group] = field(default_factory=dict)
    overall: Group = field(default_factory=lambda: Group("all"))
    supersedes: int = 0
    info_requests: int = 0
    unknown_outcomes: int = 0
    still_unknown: int = 0
    revocations: int = 0
    open: int = 0
    # Break-glass, counted by the events in the period: releases, refusals over budget,
    # post-hoc reviews done (and how many disagreed) and reviews that went past their deadline undone.
    break_glass_releases: int = 0
    break_glass_budget_refusals: int = 0
    post_hoc_done: int = 0
    post_hoc_disagreed: int = 0
    post_hoc_overdue: int = 0
    # Who decided each proposal with an outcome: "people" (approved, rejected, asked), "policy" (allowed
    # or denied by policy alone) or "grant" (allowed under a standing grant people gave ahead of time):
    # a grant that replaces all review shows here.
    decided_by: Counter = field(default_factory=Counter)

    @property
    def rubber_stamps(self) -> list[Group]:
        return [g for g in self.by_policy.values() if g.rubber_stamp]

    def days(self) -> list[tuple[date, Counter]]:
        """Every day of the period (days without proposals too), oldest first."""
        if not self.per_day:
            return []
        first = self.since.date() if self.since else min(self.per_day)
        last = (self.until - timedelta(microseconds=1)).date() if self.until else max(self.per_day)
        last = max(last, first)
        return [
            (first + timedelta(days=i), self.per_day.get(first + timedelta(days=i), Counter()))
            for i in range((last - first).days + 1)
        ]


def day_category(facts: ProposalFacts) -> str:
    """The bucket of the per-day chart."""
    if facts.first_outcome in ("approved", "allowed"):
        return "approved"
    if facts.first_outcome in ("rejected", "denied"):
        return "rejected"
    if facts.first_outcome == "expired":
        return "expired"
    return "other" if facts.first_outcome else "open"


DECIDERS = ("people", "policy", "grant")


def decided_by(facts: ProposalFacts) -> str | None:
    """Who decided the proposal (one of DECIDERS), or None when nobody did (open, expired, superseded)."""
    if facts.first_outcome in HUMAN:
        return "people"
    if facts.first_outcome == "allowed":
        return "grant" if facts.under_grant else "policy"
    if facts.first_outcome == "denied":
        return "policy"
    return None


def collect_steps(
    chain: str, *, since: datetime | None = None, until: datetime | None = None, up_to_seq: int | None = None
) -> Generator[int, None, Metrics]:
    """Metrics for the proposals submitted in [since, until); yields the events read after each page."""
    events = AuditEvent.objects.chained(chain).filter(
        verb__in=[
            Verb.PROPOSAL_SUBMITTED,
            Verb.POLICY_EVALUATED,
            Verb.PROPOSAL_TRANSITIONED,
            Verb.DECISION_REVOKED,
            Verb.VOTE_CAST,
            Verb.GRANT_USED,
            *BREAK_GLASS_VERBS,
        ],
    )
    if since:
        events = events.filter(at__gte=since)
    if up_to_seq is not None:
        events = events.filter(seq__lte=up_to_seq)
    proposals: dict[str, ProposalFacts] = {}
    metrics = Metrics(since=since, until=until)
    after, seen = 0, 0
    while True:
        page = list(
            events.filter(seq__gt=after)
            .order_by("seq")
            .values_list("seq", "subject", "verb", "at", "data")[:PAGE]
        )
        for _, subject, verb, at, data in page:
            _observe(proposals, metrics, subject, verb, at, data, until)
        seen += len(page)
        yield seen
        if len(page) < PAGE:
            break
        after = page[-1][0]
    _summarize(proposals, metrics)
    return metrics


def collect(chain: str, **bounds) -> Metrics:
    steps = collect_steps(chain, **bounds)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


BREAK_GLASS_VERBS = (
    Verb.BREAK_GLASS_RELEASED,
    Verb.BREAK_GLASS_REFUSED,
    Verb.POST_HOC_REVIEW_DONE,
    Verb.POST_HOC_REVIEW_OVERDUE,
)


def _observe_break_glass(metrics, verb, at, data, until) -> None:
    if until is not None and at >= until:
        return
    if verb == Verb.BREAK_GLASS_RELEASED:
        metrics.break_glass_releases += 1
    elif verb == Verb.BREAK_GLASS_REFUSED:
        metrics.break_glass_budget_refusals += data.get("code") == "budget_exhausted"
    elif verb == Verb.POST_HOC_REVIEW_DONE:
        metrics.post_hoc_done += 1
        metrics.post_hoc_disagreed += data.get("verdict") == "disagree"
    elif verb == Verb.POST_HOC_REVIEW_OVERDUE:
        metrics.post_hoc_overdue += 1


def _observe(proposals, metrics, subject, verb, at, data, until) -> None:
    if verb in BREAK_GLASS_VERBS:
        _observe_break_glass(metrics, verb, at, data, until)
        return
    if verb == Verb.PROPOSAL_SUBMITTED:
        if until is None or at < until:
            proposals[subject] = ProposalFacts(submitted_at=at, tool=str(data.get("tool", "")))
        return
    facts = proposals.get(subject)
    if facts is None:
        return  # submitted before the period
    if verb == Verb.POLICY_EVALUATED:
        facts.policies = tuple(f"{p.get('id')}@{p.get('version')}" for p in data.get("policies") or ()) or (
            TENANT_DEFAULT,
        )
    elif verb == Verb.PROPOSAL_TRANSITIONED:
        target = data.get("to", "")
        facts.state = target
        if facts.first_outcome is None and target in FIRST_OUTCOMES:
            facts.first_outcome = target
        if facts.decided_at is None and target in HUMAN:
            facts.decided_at = at
        if target == "superseded":
            metrics.supersedes += 1
        elif target == "info_requested":
            metrics.info_requests += 1
        elif target == "unknown":
            facts.was_unknown = True
    elif verb == Verb.DECISION_REVOKED:
        metrics.revocations += 1
    elif verb == Verb.GRANT_USED:
        facts.under_grant = True
    elif verb == Verb.VOTE_CAST and data.get("verdict") == "approve":
        facts.approvals_cast += 1
        facts.reservations += bool(data.get("reservation"))


def _summarize(proposals: dict[str, ProposalFacts], metrics: Metrics) -> None:
    for facts in proposals.values():
        metrics.submitted += 1
        day = facts.submitted_at.astimezone(UTC).date()
        metrics.per_day.setdefault(day, Counter())[day_category(facts)] += 1
        groups = [metrics.overall, metrics.by_tool.setdefault(facts.tool, Group(facts.tool))]
        groups += [
            metrics.by_policy.setdefault(label, Group(label)) for label in facts.policies or (TENANT_DEFAULT,)
        ]
        duration = (facts.decided_at - facts.submitted_at).total_seconds() if facts.decided_at else None
        for group in groups:
            group.submitted += 1
            group.approvals_cast += facts.approvals_cast
            group.reservations += facts.reservations
            if facts.first_outcome:
                group.outcomes[facts.first_outcome] += 1
            if duration is not None:
                group.durations.append(duration)
        decider = decided_by(facts)
        if decider:
            metrics.decided_by[decider] += 1
        if facts.first_outcome is None:
            metrics.open += 1
        if facts.was_unknown:
            metrics.unknown_outcomes += 1
            if facts.state == "unknown":
                metrics.still_unknown += 1
    metrics.by_policy = dict(sorted(metrics.by_policy.items()))
    metrics.by_tool = dict(sorted(metrics.by_tool.items()))


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"
