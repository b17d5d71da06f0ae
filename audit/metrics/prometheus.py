"""The Prometheus text exposition of the metrics page's counters, all time, per tenant, plus the health
of the audit chains and of the export queue.

`ReviewerCollector` yields metric families computed at scrape time; prometheus-client writes the text
format. Nothing is kept in the process-wide default registry: each scrape builds a registry of its own,
so the numbers always come from the database (several workers answer alike).

Labels are tenant slugs, policy versions, tools and outcome names; never a person. A tenant's counters
are recomputed from its audit log at most every AUDIT_METRICS_CACHE_SECONDS, and only when its chain
head moved (the log is append-only, so an unchanged head means unchanged counters).
"""

from datetime import datetime

from django.conf import settings
from django.core.cache import cache
from django.db.models import Count, Max
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from audit.chain.records import pending_by_chain
from audit.labels import tenant_chain
from audit.metrics.queue import DECIDERS, FIRST_OUTCOMES, Metrics, collect, percentile
from audit.models import ChainHead, Checkpoint, ExportJob
from tenants import queries as tenant_queries

QUANTILES = (0.5, 0.95)
TIME_TO_DECISION = "reviewer_time_to_decision_seconds"


def _tenant_metrics(tenant, head_seq: int) -> Metrics:
    key = f"audit:prometheus:{tenant_chain(tenant.id)}"
    cached = cache.get(key)
    if cached is not None and cached[0] == head_seq:
        return cached[1]
    metrics = collect(tenant_chain(tenant.id), up_to_seq=head_seq)
    cache.set(key, (head_seq, metrics), settings.AUDIT_METRICS_CACHE_SECONDS)
    return metrics


class ReviewerCollector:
    """A prometheus-client collector: every call of collect() reads the current numbers."""

    def __init__(self, now: datetime | None = None):
        self.now = now

    def collect(self):
        heads = {head.chain: head for head in ChainHead.objects.all()}
        yield from self._tenant_families(heads)
        yield from self._chain_families(heads, self.now or timezone.now())
        jobs = GaugeMetricFamily("reviewer_export_jobs", "Export jobs by status.", labels=["status"])
        for row in ExportJob.objects.values("status").annotate(n=Count("pk")).order_by("status"):
            jobs.add_metric([row["status"]], row["n"])
        yield jobs

    def _tenant_families(self, heads):
        def counter(name, help_text, *labels):
            return CounterMetricFamily(name, help_text, labels=["tenant", *labels])

        proposals = counter("reviewer_proposals_total", "Proposals submitted.")
        by_policy = counter(
            "reviewer_outcomes_by_policy_total",
            "Proposals by policy version and first outcome.",
            "policy",
            "outcome",
        )
        by_tool = counter(
            "reviewer_outcomes_by_tool_total", "Proposals by tool and first outcome.", "tool", "outcome"
        )
        supersedes = counter("reviewer_supersedes_total", "Proposals superseded (edited or replaced).")
        info_requests = counter("reviewer_info_requests_total", "Requests for more information.")
        unknown = counter("reviewer_unknown_outcomes_total", "Executions whose result was lost (unknown).")
        revocations = counter("reviewer_revocations_total", "Released decisions taken back.")
        break_glass = counter("reviewer_break_glass_releases_total", "Emergency single-approver releases.")
        glass_refused = counter(
            "reviewer_break_glass_budget_refusals_total", "Break-glass releases refused: budget used up."
        )
        post_hoc_overdue = counter(
            "reviewer_post_hoc_reviews_overdue_total", "Post-hoc reviews that passed their deadline undone."
        )
        deciders = counter(
            "reviewer_decisions_by_decider_total",
            "Proposals decided, by who decided: people, policy, or a standing grant.",
            "decided_by",
        )
        open_now = GaugeMetricFamily(
            "reviewer_open_proposals", "Proposals without an outcome yet.", labels=["tenant"]
        )
        # prometheus-client's SummaryMetricFamily has no quantiles, so the summary is built from samples.
        time_to_decision = Metric(
            TIME_TO_DECISION, "Time from submission to the first human decision.", "summary"
        )
        rubber_stamp = GaugeMetricFamily(
            "reviewer_policy_rubber_stamp",
            "1 when people approve over 99% of a policy version's requests, over a meaningful sample.",
            labels=["tenant", "policy"],
        )
        for tenant in tenant_queries.all_tenants():
            head = heads.get(tenant_chain(tenant.id))
            metrics = _tenant_metrics(tenant, head.seq if head else 0)
            t = tenant.slug
            proposals.add_metric([t], metrics.submitted)
            for group in metrics.by_policy.values():
                for outcome in FIRST_OUTCOMES:
                    by_policy.add_metric([t, group.label, outcome], group.outcomes[outcome])
                rubber_stamp.add_metric([t, group.label], int(group.rubber_stamp))
            for group in metrics.by_tool.values():
                for outcome in FIRST_OUTCOMES:
                    by_tool.add_metric([t, group.label, outcome], group.outcomes[outcome])
            supersedes.add_metric([t], metrics.supersedes)
            info_requests.add_metric([t], metrics.info_requests)
            unknown.add_metric([t], metrics.unknown_outcomes)
            revocations.add_metric([t], metrics.revocations)
            break_glass.add_metric([t], metrics.break_glass_releases)
            glass_refused.add_metric([t], metrics.break_glass_budget_refusals)
            post_hoc_overdue.add_metric([t], metrics.post_hoc_overdue)
            open_now.add_metric([t], metrics.open)
            for decider in DECIDERS:
                deciders.add_metric([t, decider], metrics.decided_by[decider])
            durations = sorted(metrics.overall.durations)
            for quantile in QUANTILES:
                value = percentile(durations, quantile)
                time_to_decision.add_sample(
                    TIME_TO_DECISION,
                    {"tenant": t, "quantile": str(quantile)},
                    float("nan") if value is None else value,
                )
            time_to_decision.add_sample(TIME_TO_DECISION + "_sum", {"tenant": t}, sum(durations))
            time_to_decision.add_sample(TIME_TO_DECISION + "_count", {"tenant": t}, len(durations))
        yield from (proposals, by_policy, by_tool, supersedes, info_requests, unknown, revocations, open_now)
        yield from (time_to_decision, rubber_stamp, break_glass, glass_refused, post_hoc_overdue, deciders)

    def _chain_families(self, heads, now: datetime):
        head_seq = GaugeMetricFamily(
            "reviewer_audit_chain_head", "Sequence number of the chain's last event.", labels=["chain"]
        )
        unsigned = GaugeMetricFamily(
            "reviewer_audit_unsigned_events",
            "Events after the chain's last signed checkpoint.",
            labels=["chain"],
        )
        checkpoint_age = GaugeMetricFamily(
            "reviewer_audit_checkpoint_age_seconds", "Age of the chain's last checkpoint.", labels=["chain"]
        )
        latest = {
            row["chain"]: row
            for row in Checkpoint.objects.values("chain").annotate(last_seq=Max("seq"), last_at=Max("at"))
        }
        # Events accepted but not chained yet: a count that stays up, or an oldest age past
        # AUDIT_PENDING_ALERT_SECONDS, means no worker is chaining (AUDIT_SEQUENCING = "worker").
        pending = GaugeMetricFamily(
            "reviewer_audit_pending_events", "Events accepted, not chained yet.", labels=["chain"]
        )
        oldest = GaugeMetricFamily(
            "reviewer_audit_oldest_pending_seconds",
            "Age of the chain's oldest event not chained yet (0: none).",
            labels=["chain"],
        )
        waiting = pending_by_chain()
        for chain in sorted(set(heads) | set(waiting)):
            row = waiting.get(chain)
            pending.add_metric([chain], row["count"] if row else 0)
            age = (now - row["oldest"]).total_seconds() if row else 0.0
            oldest.add_metric([chain], round(max(age, 0.0), 3))
        yield from (pending, oldest)
        for chain, head in sorted(heads.items()):
            checkpoint = latest.get(chain)
            head_seq.add_metric([chain], head.seq)
            unsigned.add_metric([chain], head.seq - (checkpoint["last_seq"] if checkpoint else 0))
            if checkpoint:
                checkpoint_age.add_metric([chain], round((now - checkpoint["last_at"]).total_seconds(), 3))
        yield from (head_seq, unsigned, checkpoint_age)


def exposition(now: datetime | None = None) -> str:
    """The text format (0.0.4) of one scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ReviewerCollector(now))
    return generate_latest(registry).decode()
