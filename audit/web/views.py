"""Compliance pages under /audit/, and the Prometheus endpoint.

Every page needs a logged-in, OTP-verified user (django-otp's `otp_required`) whose role in the tenant
is compliance or admin; the metrics page also admits the tenant's reviewers (aggregates, no personal
identifiers). Anyone else, and every other tenant, gets 404. Nothing here changes the approval domain;
the only writes are export jobs and the audit events that record who exported what.
"""

import hmac
import uuid
from dataclasses import replace

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from audit.chain.records import event_dict, pending_by_chain
from audit.exports import evidence, jobs, verifier_wheel
from audit.exports.lines import Selection, chunks, count
from audit.labels import actor_label, tenant_chain
from audit.metrics.charts import metric_charts
from audit.metrics.prometheus import exposition
from audit.metrics.queue import collect, format_duration, rubber_stamp_min_sample
from audit.models import ChainHead, Checkpoint, ExportJob
from audit.people import display_names, pseudonyms_in
from audit.web.forms import ExportForm, PeriodForm, SelectionForm
from lib.decorators import verified_required
from tenants import queries as tenant_queries

EVENTS_PER_PAGE = 100


def published_jwks_url() -> str:
    """Where Reviewer publishes its public keys: what a verifier pins."""
    return f"{settings.REVIEWER_ISSUER}/.well-known/jwks.json"


def _tenant(request, slug: str, roles=tenant_queries.AUDIT_ROLES) -> tenant_queries.TenantRef:
    """The tenant, if this user holds one of `roles` in it; 404 for everyone else."""
    tenant = tenant_queries.tenant_for(request.user, slug, roles)
    if tenant is None:
        raise Http404("no such tenant")
    return tenant


def _actor(request) -> str:
    return actor_label(request.user)


def _stamp() -> str:
    return timezone.now().strftime("%Y%m%dT%H%M%SZ")


def _streaming(request, sync_chunks, content_type: str, filename: str, length: int | None = None):
    """Stream without holding the body in memory. Under ASGI (Daphne) Django would first read a sync
    iterator into a list, so it gets an async iterator there; the test client (WSGI) gets the sync one."""
    if isinstance(request, ASGIRequest):

        async def body():
            step = sync_to_async(lambda: next(sync_chunks, None))
            while (chunk := await step()) is not None:
                yield chunk

        response = StreamingHttpResponse(body(), content_type=content_type)
    else:
        response = StreamingHttpResponse(sync_chunks, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    if length is not None:
        response["Content-Length"] = str(length)
    response["Cache-Control"] = "no-store"
    return response


def _file_chunks(path, block: int = 1 << 16):
    with open(path, "rb") as file:
        while data := file.read(block):
            yield data


# --------------------------------------------------------------------------------------------------
# Pages


@require_GET
@verified_required
def index(request):
    tenants = tenant_queries.tenants_for(request.user, tenant_queries.METRICS_ROLES)
    if not tenants:
        raise Http404("no tenant whose audit trail you may read")
    if len(tenants) == 1:
        only = tenants[0]
        return redirect(
            "audit:tenant" if only.role in tenant_queries.AUDIT_ROLES else "audit:metrics", tenant=only.slug
        )
    return render(
        request,
        "audit/index.html",
        {"tenants": tenants, "audit_roles": tenant_queries.AUDIT_ROLES, "nav": "audit"},
    )


def _home_context(tenant, form) -> dict:
    chain = tenant_chain(tenant.id)
    head = ChainHead.objects.filter(chain=chain).first()
    checkpoint = Checkpoint.objects.filter(chain=chain).order_by("-seq").first()
    unsigned = (head.seq - checkpoint.seq) if head and checkpoint else 0
    waiting = pending_by_chain(chain).get(chain, {"count": 0, "oldest": None})
    waited = (timezone.now() - waiting["oldest"]).total_seconds() if waiting["oldest"] else 0.0
    return {
        "tenant": tenant,
        "form": form,
        "head": head,
        "checkpoint": checkpoint,
        "unsigned": unsigned,
        # Accepted, not chained yet: a worker chains them within seconds; past the alert age none is.
        "pending": {
            "count": waiting["count"],
            "seconds": int(waited),
            "overdue": waited > settings.AUDIT_PENDING_ALERT_SECONDS,
        },
        "nav": "audit",
        "jobs": ExportJob.objects.filter(tenant_id=tenant.id).select_related("requested_by")[:10],
        "stream_max": settings.AUDIT_EXPORT_STREAM_MAX_EVENTS,
        "jwks_url": published_jwks_url(),
        "verifier_url": verifier_wheel.install_url(),
    }


@require_GET
def verifier_download(request, filename):
    """GET /audit/reviewer-verify/<wheel name>: the offline verifier as a wheel, for `pip install <URL>`
    (audit/exports/verifier_wheel.py). Public, as the keys it checks against are: it is Reviewer's own
    code and holds no secret, and pip cannot sign in."""
    if filename != verifier_wheel.wheel_name():
        raise Http404("no such file")
    response = HttpResponse(verifier_wheel.wheel_bytes(), content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_GET
@verified_required
def tenant_home(request, tenant):
    tenant = _tenant(request, tenant)
    return render(request, "audit/tenant.html", _home_context(tenant, ExportForm(initial={"format": "csv"})))


@require_POST
@verified_required
def export(request, tenant):
    """CSV and JSON Lines up to AUDIT_EXPORT_STREAM_MAX_EVENTS stream straight away; anything larger, and
    every PDF and bundle, becomes a background job with a progress page."""
    tenant = _tenant(request, tenant)
    form = ExportForm(request.POST)
    if not form.is_valid():
        return render(request, "audit/tenant.html", _home_context(tenant, form), status=400)
    kind, filters = form.cleaned_data["format"], form.filters()
    if kind in (ExportJob.Kind.CSV, ExportJob.Kind.JSONL):
        selection = Selection.for_tenant(tenant, filters, up_to_seq=jobs.head_seq(tenant_chain(tenant.id)))
        if count(selection) <= settings.AUDIT_EXPORT_STREAM_MAX_EVENTS:
            up_to_seq = jobs.record_export(
                tenant,
                actor=_actor(request),
                kind=kind,
                filters=filters,
                subject=f"export:{uuid.uuid4()}",
                delivery="stream",
            )
            return _streaming(
                request,
                chunks(replace(selection, up_to_seq=up_to_seq), kind),
                jobs.CONTENT_TYPES[kind],
                f"audit-{tenant.slug}-{_stamp()}.{jobs.EXTENSIONS[kind]}",
            )
    job = jobs.create_export(tenant, user=request.user, kind=kind, filters=filters)
    return redirect("audit:export_job", tenant=tenant.slug, job_id=job.id)


@require_GET
@verified_required
def export_job(request, tenant, job_id):
    tenant = _tenant(request, tenant)
    job = get_object_or_404(ExportJob.objects.select_related("requested_by"), pk=job_id, tenant_id=tenant.id)
    template = "audit/export_job.html#progress" if request.htmx else "audit/export_job.html"
    context = {
        "tenant": tenant,
        "job": job,
        "nav": "audit",
        "download_name": jobs.download_name(job, tenant.slug),
        "jwks_url": published_jwks_url(),
        "verifier_url": verifier_wheel.install_url(),
    }
    return render(request, template, context)


@require_GET
@verified_required
def export_download(request, tenant, job_id):
    tenant = _tenant(request, tenant)
    job = get_object_or_404(ExportJob, pk=job_id, tenant_id=tenant.id, status=ExportJob.Status.DONE)
    path = jobs.export_path(job)
    if not path.exists():
        raise Http404("the export file is gone; export again")
    response = _streaming(
        request,
        _file_chunks(path),
        jobs.CONTENT_TYPES[job.kind],
        jobs.download_name(job, tenant.slug),
        length=path.stat().st_size,
    )
    response["X-Content-SHA256"] = job.sha256
    return response


@require_GET
@verified_required
def events(request, tenant):
    """The trail itself, newest first, 100 a page (keyset pagination: `before` a seq)."""
    tenant = _tenant(request, tenant)
    form = SelectionForm(request.GET or None)
    filters = form.filters() if form.is_bound and form.is_valid() else {}
    selection = Selection.for_tenant(tenant, filters)
    page = selection.events()
    before = request.GET.get("before", "")
    if before.isdigit():
        page = page.filter(seq__lt=int(before))
    rows = [event_dict(e) for e in page.order_by("-seq")[: EVENTS_PER_PAGE + 1]]
    more = len(rows) > EVENTS_PER_PAGE
    rows = rows[:EVENTS_PER_PAGE]
    names = display_names(pseudonyms_in(rows))  # the trail holds pseudonyms; the directory names them
    for row in rows:
        row["actor_name"], row["subject_name"] = names.get(row["actor"], ""), names.get(row["subject"], "")
    query = request.GET.copy()
    query.pop("before", None)
    return render(
        request,
        "audit/events.html",
        {
            "tenant": tenant,
            "form": form,
            "rows": rows,
            "nav": "audit",
            "query": query.urlencode(),
            "next_before": rows[-1]["seq"] if more and rows else None,
            "filtered": bool(filters and any(filters.values())),
        },
    )


@require_GET
@verified_required
def evidence_page(request, tenant, proposal_id):
    tenant = _tenant(request, tenant)
    packet = evidence.build_packet(tenant, proposal_id)
    if packet is None:
        raise Http404("no such proposal")
    checks = [(evidence.CHECK_LABELS.get(name, name), value) for name, value in packet["checks"].items()]
    return render(
        request, "audit/evidence.html", {"tenant": tenant, "packet": packet, "checks": checks, "nav": "audit"}
    )


def _evidence_download(request, tenant, proposal_id, kind: str):
    tenant = _tenant(request, tenant)
    packet = evidence.build_packet(tenant, proposal_id)
    if packet is None:
        raise Http404("no such proposal")
    jobs.record_export(
        tenant,
        actor=_actor(request),
        kind=f"evidence_{kind}",
        filters={"proposal": str(proposal_id)},
        subject=f"proposal:{proposal_id}",
        delivery="download",
    )
    if kind == "json":
        body, content_type = evidence.packet_json(packet), "application/json"
    else:
        from io import BytesIO

        from audit.exports.pdf import write_evidence

        buffer = BytesIO()
        write_evidence(packet, buffer)
        body, content_type = buffer.getvalue(), "application/pdf"
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="evidence-{proposal_id}.{kind}"'
    response["Cache-Control"] = "no-store"
    return response


@require_GET
@verified_required
def evidence_json(request, tenant, proposal_id):
    return _evidence_download(request, tenant, proposal_id, "json")


@require_GET
@verified_required
def evidence_pdf(request, tenant, proposal_id):
    return _evidence_download(request, tenant, proposal_id, "pdf")


@require_GET
@verified_required
def metrics_page(request, tenant):
    tenant = _tenant(request, tenant, tenant_queries.METRICS_ROLES)
    form = PeriodForm(request.GET or None)
    since, until = form.bounds()
    metrics = collect(tenant_chain(tenant.id), since=since, until=until)
    return render(
        request,
        "audit/metrics.html",
        {
            "tenant": tenant,
            "form": form,
            "metrics": metrics,
            "charts": metric_charts(metrics),
            "nav": "audit",
            "since": since,
            "until": until,
            "min_sample": rubber_stamp_min_sample(),
            "overall_median": format_duration(metrics.overall.median_seconds),
            "overall_p95": format_duration(metrics.overall.p95_seconds),
            "can_export": tenant.role in tenant_queries.AUDIT_ROLES,
        },
    )


# --------------------------------------------------------------------------------------------------
# Prometheus


@require_GET
def prometheus(request):
    """Text exposition of the same counters, for a scraper holding `Authorization: Bearer <METRICS_TOKEN>`.
    Off (404) while METRICS_TOKEN is unset."""
    token = settings.METRICS_TOKEN
    if not token:
        raise Http404("metrics are off: set METRICS_TOKEN")
    supplied = request.headers.get("Authorization", "").encode()
    if not hmac.compare_digest(supplied, f"Bearer {token}".encode()):
        response = HttpResponse("a bearer token is required\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(exposition(), content_type="text/plain; version=0.0.4; charset=utf-8")
