"""`manage.py worker_health [--pid PID | --any] [--wait SECONDS]`: exit 0 when the worker ticked within
READY_WORKER_TICK_MAX_SECONDS, else 1. A probe for systemd (deploy/reviewer-worker.service runs it as
ExecStartPost with --pid $MAINPID --wait) and for Kubernetes (an exec liveness probe in the worker's
container: the default looks at the workers of this host, i.e. of the pod)."""

import os
import socket
import time

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import close_old_connections
from django.utils import timezone

from health import heartbeats


class Command(BaseCommand):
    help = "Exit 0 if a worker (of this host by default) finished a tick recently, 1 if not."

    def add_arguments(self, parser):
        parser.add_argument("--pid", type=int, help="only the worker with this process id, on this host")
        parser.add_argument("--any", dest="any_host", action="store_true", help="any worker on any host")
        parser.add_argument(
            "--wait", type=float, default=0, help="seconds to keep looking before giving up (start-up)"
        )
        parser.add_argument(
            "--max-age",
            type=float,
            default=None,
            help="seconds since the last tick still healthy (default READY_WORKER_TICK_MAX_SECONDS)",
        )

    def handle(self, *args, pid, any_host, wait, max_age, **options):
        limit = settings.READY_WORKER_TICK_MAX_SECONDS if max_age is None else max_age
        host = None if any_host else socket.gethostname()
        who = "any worker" if any_host else f"worker {host}:{pid}" if pid else f"a worker on {host}"
        if pid and pid == os.getpid():
            who += " (this command's own pid: pass the worker's)"
        deadline = time.monotonic() + wait
        while True:
            newest = heartbeats.newest_tick(host=host, pid=pid)
            age = (timezone.now() - newest).total_seconds() if newest else None
            if age is not None and age <= limit:
                self.stdout.write(f"healthy: {who} ticked {age:.1f} s ago")
                return
            if time.monotonic() >= deadline:
                break
            close_old_connections()
            time.sleep(0.5)  # a probe's poll interval, bounded by --wait
        told = "never ticked" if age is None else f"last ticked {age:.1f} s ago (limit {limit:g} s)"
        self.stderr.write(f"unhealthy: {who} {told}")
        raise SystemExit(1)
