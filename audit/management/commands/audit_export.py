"""`manage.py audit_export --tenant SLUG --format csv|jsonl|pdf|bundle --output PATH [filters]`: write one
export now, in constant memory (recorded in the tenant's chain like an export from the page);
`manage.py audit_export --run-pending`: run the queued background exports to the end (without a worker)."""

import sys
from datetime import date
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from audit.exports import jobs
from audit.exports.bundles import write_bundle
from audit.exports.lines import OUTCOMES, Selection, day_bounds, write_lines
from audit.models import ExportJob
from tenants import queries as tenant_queries


def _drain(progress) -> int:
    """Run an export generator to the end; returns its last progress count."""
    done = 0
    for done in progress:  # noqa: B007 (the last value is the count)
        pass
    return done


class Command(BaseCommand):
    help = "Export a tenant's audit trail (CSV, JSON Lines, PDF report, verifiable bundle)."

    def add_arguments(self, parser):
        parser.add_argument("--run-pending", action="store_true", help="run the queued background exports")
        parser.add_argument("--tenant", metavar="SLUG", help="the tenant (slug or id)")
        parser.add_argument("--format", choices=list(jobs.EXTENSIONS), default="jsonl")
        parser.add_argument(
            "--output",
            "-o",
            metavar="PATH",
            help="file to write; '-' is standard output (CSV and JSON Lines only)",
        )
        parser.add_argument("--since", type=date.fromisoformat, help="first day (UTC), YYYY-MM-DD")
        parser.add_argument("--until", type=date.fromisoformat, help="last day (UTC, inclusive), YYYY-MM-DD")
        parser.add_argument("--policy", default="", help="slug or slug@version")
        parser.add_argument("--agent", default="", help="agent slug")
        parser.add_argument("--reviewer", default="", help="username")
        parser.add_argument("--outcome", default="", choices=["", *OUTCOMES])

    def handle(self, *args, **options):
        if options["run_pending"]:
            return self._run_pending()
        if not options["tenant"] or not options["output"]:
            raise CommandError("--tenant and --output are required (or --run-pending)")
        tenant = tenant_queries.tenant_by_key(options["tenant"])
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        kind, output = options["format"], options["output"]
        if output == "-" and kind not in ("csv", "jsonl"):
            raise CommandError("PDF reports and bundles are written to a file: give --output PATH")
        filters = {
            **day_bounds(options["since"], options["until"]),
            **{name: options[name] for name in ("policy", "agent", "reviewer", "outcome")},
        }
        up_to_seq = jobs.record_export(
            tenant, actor="system", kind=kind, filters=filters, subject="export:command", delivery="command"
        )
        selection = Selection.for_tenant(tenant, filters, up_to_seq=up_to_seq)
        if kind in ("csv", "jsonl"):
            if output == "-":
                done = _drain(write_lines(selection, kind, sys.stdout.buffer))
                sys.stdout.buffer.flush()
            else:
                with open(output, "wb") as out:
                    done = _drain(write_lines(selection, kind, out))
        elif kind == "bundle":
            done = _drain(write_bundle(selection, Path(output), created_by="system"))
        else:
            from audit.exports.pdf import write_report

            done = _drain(write_report(selection, Path(output), created_by="system"))
        if output != "-":
            self.stderr.write(f"{output}: {kind} of {tenant.slug} ({selection.describe()}), {done} events")

    def _run_pending(self):
        ran = 0
        for job in ExportJob.objects.filter(status=ExportJob.Status.PENDING).order_by("created_at"):
            try:
                job = jobs.run_export(job)
            except ValueError:
                continue  # claimed meanwhile by a worker
            ran += 1
            self.stdout.write(f"{job.id}: {job.kind} {job.status} {job.error}")
        self.stdout.write(f"{ran} export(s) run")
