"""Background exports and time-based checkpoints. The delivery worker calls `run_pending_exports()`
every tick (after `audit.chain.sequencer.sequence_pending()`).

Cooperative, so a long export never holds up the deliveries: each call works for at most
AUDIT_EXPORT_TICK_SECONDS, one page of events at a time, then hands the worker back; the export's
generator waits in this process for the next tick. Progress (`ExportJob.done`) is saved after every
page, which is what the page's progress bar polls. A job claimed by a worker that died (no progress for
AUDIT_EXPORT_STALE_SECONDS) goes back to pending and starts over.
"""

import hashlib
import logging
import os
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit.chain.accept import append
from audit.chain.checkpoints import write_due_checkpoints
from audit.chain.sequencer import make_seals_durable, sequence_chain
from audit.exports.bundles import bundle_segment, write_bundle
from audit.exports.lines import Selection, count, write_lines
from audit.labels import actor_label, tenant_chain
from audit.models import AuditSeal, ChainHead, ExportJob, Verb
from tenants import queries as tenant_queries
from tenants.models import Tenant

log = logging.getLogger(__name__)

EXTENSIONS = {"csv": "csv", "jsonl": "jsonl", "pdf": "pdf", "bundle": "zip"}
CONTENT_TYPES = {
    "csv": "text/csv; charset=utf-8",
    "jsonl": "application/jsonl; charset=utf-8",
    "pdf": "application/pdf",
    "bundle": "application/zip",
}

# Exports this process is working on, between ticks: {job id: its generator}.
_active: dict[uuid.UUID, Iterator[None]] = {}


def record_export(tenant, *, actor: str, kind: str, filters: dict, subject: str, delivery: str) -> int:
    """Write the export.created event in its own transaction and chain what has committed; returns the
    event's seq, which bounds the export: it is a snapshot of the chain including its own request."""
    with transaction.atomic():
        event = append(
            tenant_chain(tenant.id),
            actor=actor,
            verb=Verb.EXPORT_CREATED,
            subject=subject,
            data={"kind": kind, "filters": filters, "delivery": delivery},
        )
    sequence_chain(tenant_chain(tenant.id))  # the export's own event, and everything committed before it
    seq = AuditSeal.objects.get(event_id=event.id).seq
    make_seals_durable(tenant_chain(tenant.id))  # the snapshot's seals are on disk before any leaves
    return seq


def create_export(tenant, *, user, kind: str, filters: dict) -> ExportJob:
    """Queue a background export of the tenant's chain (recorded in that chain)."""
    if kind not in EXTENSIONS:
        raise ValueError(f"unknown export kind {kind!r}")
    job_id = uuid.uuid4()
    actor = actor_label(user)
    up_to_seq = record_export(
        tenant, actor=actor, kind=kind, filters=filters, subject=f"export:{job_id}", delivery="background"
    )
    return ExportJob.objects.create(
        id=job_id,
        tenant_id=tenant.id,
        chain=tenant_chain(tenant.id),
        requested_by=user,
        kind=kind,
        filters=filters,
        up_to_seq=up_to_seq,
        updated_at=timezone.now(),
    )


def export_path(job: ExportJob):
    return Path(settings.AUDIT_EXPORT_DIR) / f"{job.id}.{EXTENSIONS[job.kind]}"


def download_name(job: ExportJob, tenant_slug: str) -> str:
    """The file name a download is saved under, which the bundle's README names too."""
    return f"audit-{tenant_slug}-{job.created_at:%Y%m%dT%H%M%SZ}.{EXTENSIONS[job.kind]}"


def _save(job: ExportJob, **fields) -> None:
    fields["updated_at"] = timezone.now()
    ExportJob.objects.filter(pk=job.pk).update(**fields)
    for name, value in fields.items():
        setattr(job, name, value)


def _total(job: ExportJob, selection: Selection) -> int:
    if job.kind == ExportJob.Kind.BUNDLE:
        segment = bundle_segment(selection)
        return max(segment.last_seq - segment.first_seq + 1, 0)
    if job.kind == ExportJob.Kind.PDF:
        # The report verifies the whole chain, then reads the period.
        return job.up_to_seq + selection.period_events().count()
    return count(selection)


def _steps(job: ExportJob) -> Iterator[None]:
    """The export as a generator: one step per page of events. Never raises: a failure marks the job."""
    final = export_path(job)
    partial = final.with_name(final.name + ".part")
    try:
        tenant = tenant_queries.tenant_by_id(job.tenant_id)
        if tenant is None:
            raise ValueError(f"tenant {job.tenant_id} no longer exists")
        selection = Selection.for_tenant(tenant, job.filters, up_to_seq=job.up_to_seq)
        created_by = actor_label(job.requested_by)
        final.parent.mkdir(parents=True, exist_ok=True)
        _save(job, total=_total(job, selection), done=0)
        yield
        if job.kind in (ExportJob.Kind.CSV, ExportJob.Kind.JSONL):
            with partial.open("wb") as out:
                for done in write_lines(selection, job.kind, out):
                    _save(job, done=done)
                    yield
        elif job.kind == ExportJob.Kind.BUNDLE:
            slug = Tenant.objects.values_list("slug", flat=True).get(pk=job.tenant_id)
            named = download_name(job, slug)
            for done in write_bundle(selection, partial, created_by=created_by, download_name=named):
                _save(job, done=done)
                yield
        else:
            from audit.exports.pdf import write_report

            for done in write_report(selection, partial, created_by=created_by):
                _save(job, done=min(done, job.total))
                yield
        os.replace(partial, final)
        digest, size = hashlib.sha256(), 0
        with final.open("rb") as written:
            for block in iter(lambda: written.read(1 << 16), b""):
                digest.update(block)
                size += len(block)
        _save(
            job,
            status=ExportJob.Status.DONE,
            done=job.total,
            file_name=final.name,
            sha256=digest.hexdigest(),
            size=size,
            finished_at=timezone.now(),
        )
    except Exception as error:  # a broken export must not take the worker down; the page shows why
        log.exception("export %s failed", job.pk)
        partial.unlink(missing_ok=True)
        _save(
            job,
            status=ExportJob.Status.FAILED,
            error=f"{type(error).__name__}: {error}"[:2000],
            finished_at=timezone.now(),
        )


def _claim(job_id) -> ExportJob | None:
    """Compare-and-set pending → running: exactly one worker gets each job."""
    stamp = timezone.now()
    if (
        ExportJob.objects.filter(pk=job_id, status=ExportJob.Status.PENDING).update(
            status=ExportJob.Status.RUNNING, started_at=stamp, updated_at=stamp
        )
        != 1
    ):
        return None
    return ExportJob.objects.select_related("requested_by").get(pk=job_id)


def _requeue_stale() -> int:
    cutoff = timezone.now() - timedelta(seconds=settings.AUDIT_EXPORT_STALE_SECONDS)
    stale = ExportJob.objects.filter(status=ExportJob.Status.RUNNING, updated_at__lt=cutoff).exclude(
        pk__in=list(_active)
    )
    if not stale.exists():  # a tick with nothing to do writes nothing (SQLite: no write lock taken)
        return 0
    return stale.update(status=ExportJob.Status.PENDING, done=0)


def run_pending_exports(budget_seconds: float | None = None) -> int:
    """One worker tick: time-based checkpoints, then export work for up to `budget_seconds`.
    Returns how many exports finished during this call."""
    write_due_checkpoints()
    _requeue_stale()
    deadline = time.monotonic() + (
        settings.AUDIT_EXPORT_TICK_SECONDS if budget_seconds is None else budget_seconds
    )
    finished = 0
    while time.monotonic() < deadline:
        if not _active:
            pending = (
                ExportJob.objects.filter(status=ExportJob.Status.PENDING)
                .order_by("created_at")
                .values_list("pk", flat=True)[:5]
            )
            job = next((claimed for claimed in map(_claim, pending) if claimed is not None), None)
            if job is None:
                break
            _active[job.pk] = _steps(job)
        job_id, steps = next(iter(_active.items()))
        try:
            next(steps)
        except StopIteration:
            del _active[job_id]
            finished += 1
    return finished


def run_export(job: ExportJob) -> ExportJob:
    """Run one queued export to the end in this process (management command, tests)."""
    claimed = _claim(job.pk)
    if claimed is None:
        raise ValueError(f"export {job.pk} is {ExportJob.objects.get(pk=job.pk).status}, not pending")
    for _ in _steps(claimed):
        pass
    claimed.refresh_from_db()
    return claimed


def head_seq(chain: str) -> int:
    head = ChainHead.objects.filter(chain=chain).first()
    return head.seq if head else 0
