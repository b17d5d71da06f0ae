"""/metrics: the audit app's exposition (audit/prometheus.py, behind its METRICS_TOKEN check) followed
by this process's readiness and the worker's and the outbox's measurements. The audit sequencer's lag is
already there (reviewer_audit_oldest_pending_seconds).

Each Daphne answers for itself (its database, Redis and migrations checks): scrape every one by its
address, as Prometheus does with one target per process."""

from asgiref.sync import async_to_sync
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from audit.web import views as audit_views
from health import checks, heartbeats


class HealthCollector:
    """A prometheus-client collector read at each scrape, like audit's ReviewerCollector."""

    def collect(self):
        readiness = async_to_sync(checks.readiness)(checks.selected(set()))
        ready = GaugeMetricFamily(
            "reviewer_ready", "1 when the readiness check passes in this process (/readyz).", labels=["check"]
        )
        latency = GaugeMetricFamily(
            "reviewer_ready_check_seconds", "How long the readiness check took.", labels=["check"]
        )
        for result in readiness.results:
            ready.add_metric([result.name], int(result.ok))
            latency.add_metric([result.name], round(result.seconds, 6))
        yield from (ready, latency)
        now = timezone.now()
        ticks = GaugeMetricFamily(
            "reviewer_worker_last_tick_age_seconds",
            "Seconds since the worker process (host:pid) finished a tick.",
            labels=["worker"],
        )
        for worker, age in heartbeats.tick_ages(now).items():
            ticks.add_metric([worker], round(age, 3))
        count, oldest = checks.outbox_backlog(now)
        yield ticks
        yield GaugeMetricFamily("reviewer_outbox_due_messages", "Outbox messages due now.", value=count)
        yield GaugeMetricFamily(
            "reviewer_outbox_oldest_due_seconds",
            "How long the oldest due outbox message has been due (0: none).",
            value=round(oldest, 3),
        )


def exposition() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HealthCollector())
    return generate_latest(registry)


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    response = audit_views.prometheus(request)
    if response.status_code == 200:
        response.content = response.content + exposition()
    return response
