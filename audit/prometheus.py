"""The Prometheus text exposition (format 0.0.4), written by hand: the metrics page's counters, all
time, per tenant, plus the health of the audit chains and of the export queue.

Labels are tenant slugs, policy versions, tools and outcome names; never a person. A tenant's counters
are recomputed from its audit log at most every AUDIT_METRICS_CACHE_SECONDS, and only when its chain
head moved (the log is append-only, so an unchanged head means unchanged counters).
"""

from datetime import UTC, datetime

from django.core.cache import cache
from django.db.models import Count, Max

from audit import conf
from audit.metrics import FIRST_OUTCOMES, Metrics, collect, percentile
from audit.models import ChainHead, Checkpoint, ExportJob
from tenants import queries as tenant_queries

QUANTILES = (0.5, 0.95)


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels) -> str:
    return "{" + ",".join(f'{name}="{_escape(value)}"' for name, value in labels.items()) + "}"


class Exposition:
    def __init__(self):
        self.families: dict[str, tuple[str, str, list[str]]] = {}

    def add(self, name: str, kind: str, help_text: str, value, **labels) -> None:
        family = self.families.setdefault(name, (kind, help_text, []))
        suffix = name
        if kind == "summary" and "quantile" not in labels:
            suffix = name + labels.pop("_part")
        family[2].append(f"{suffix}{_labels(**labels) if labels else ''} {value}")

    def text(self) -> str:
        lines = []
        for name, (kind, help_text, samples) in self.families.items():
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]
        return "\n".join(lines) + "\n"


def _tenant_metrics(tenant, head_seq: int) -> Metrics:
    key = f"audit:prometheus:{tenant.chain}"
    cached = cache.get(key)
    if cached is not None and cached[0] == head_seq:
        return cached[1]
    metrics = collect(tenant.chain, up_to_seq=head_seq)
    cache.set(key, (head_seq, metrics), conf.metrics_cache_seconds())
    return metrics


def exposition(now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    out = Exposition()
    heads = {head.chain: head for head in ChainHead.objects.all()}
    for tenant in tenant_queries.all_tenants():
        head = heads.get(tenant.chain)
        metrics = _tenant_metrics(tenant, head.seq if head else 0)
        t = tenant.slug
        out.add("reviewer_proposals_total", "counter", "Proposals submitted.", metrics.submitted, tenant=t)
        for group in metrics.by_policy.values():
            for outcome in FIRST_OUTCOMES:
                out.add(
                    "reviewer_outcomes_by_policy_total",
                    "counter",
                    "Proposals by policy version and first outcome.",
                    group.outcomes[outcome],
                    tenant=t,
                    policy=group.label,
                    outcome=outcome,
                )
        for group in metrics.by_tool.values():
            for outcome in FIRST_OUTCOMES:
                out.add(
                    "reviewer_outcomes_by_tool_total",
                    "counter",
                    "Proposals by tool and first outcome.",
                    group.outcomes[outcome],
                    tenant=t,
                    tool=group.label,
                    outcome=outcome,
                )
        out.add(
            "reviewer_supersedes_total",
            "counter",
            "Proposals superseded (edited or replaced).",
            metrics.supersedes,
            tenant=t,
        )
        out.add(
            "reviewer_info_requests_total",
            "counter",
            "Requests for more information.",
            metrics.info_requests,
            tenant=t,
        )
        out.add(
            "reviewer_unknown_outcomes_total",
            "counter",
            "Executions whose result was lost (unknown).",
            metrics.unknown_outcomes,
            tenant=t,
        )
        out.add(
            "reviewer_revocations_total",
            "counter",
            "Released decisions taken back.",
            metrics.revocations,
            tenant=t,
        )
        out.add(
            "reviewer_open_proposals", "gauge", "Proposals without an outcome yet.", metrics.open, tenant=t
        )
        durations = sorted(metrics.overall.durations)
        for quantile in QUANTILES:
            value = percentile(durations, quantile)
            out.add(
                "reviewer_time_to_decision_seconds",
                "summary",
                "Time from submission to the first human decision.",
                "NaN" if value is None else value,
                tenant=t,
                quantile=str(quantile),
            )
        out.add("reviewer_time_to_decision_seconds", "summary", "", sum(durations), tenant=t, _part="_sum")
        out.add("reviewer_time_to_decision_seconds", "summary", "", len(durations), tenant=t, _part="_count")
        for group in metrics.by_policy.values():
            out.add(
                "reviewer_policy_rubber_stamp",
                "gauge",
                "1 when people approve over 99% of a policy version's requests, over a meaningful sample.",
                int(group.rubber_stamp),
                tenant=t,
                policy=group.label,
            )
    latest = {
        row["chain"]: row
        for row in Checkpoint.objects.values("chain").annotate(last_seq=Max("seq"), last_at=Max("at"))
    }
    for chain, head in sorted(heads.items()):
        out.add(
            "reviewer_audit_chain_head",
            "gauge",
            "Sequence number of the chain's last event.",
            head.seq,
            chain=chain,
        )
        checkpoint = latest.get(chain)
        out.add(
            "reviewer_audit_unsigned_events",
            "gauge",
            "Events after the chain's last signed checkpoint.",
            head.seq - (checkpoint["last_seq"] if checkpoint else 0),
            chain=chain,
        )
        if checkpoint:
            out.add(
                "reviewer_audit_checkpoint_age_seconds",
                "gauge",
                "Age of the chain's last checkpoint.",
                round((now - checkpoint["last_at"]).total_seconds(), 3),
                chain=chain,
            )
    for row in ExportJob.objects.values("status").annotate(n=Count("pk")).order_by("status"):
        out.add("reviewer_export_jobs", "gauge", "Export jobs by status.", row["n"], status=row["status"])
    return out.text()
