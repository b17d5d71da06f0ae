"""`manage.py run_worker [--once] [--interval SECONDS]`: the worker's jobs (approvals/worker/jobs.py), each
on a thread of its own; `--once` runs each once and exits."""

import signal
import threading

from django.core.management.base import BaseCommand

from approvals.worker.loop import POLL_SECONDS, Worker


class Command(BaseCommand):
    help = "Deliver decisions and cancels to agents, expire what waited too long, reconcile executions."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="run every job once, in order, and exit")
        parser.add_argument(
            "--interval",
            type=float,
            default=POLL_SECONDS,
            help="seconds between runs of the jobs with no interval of their own "
            f"(default {POLL_SECONDS:g}); a committed outbox message wakes the outbox job at once",
        )
        parser.add_argument(
            "--batch", type=int, default=20, help="outbox messages (or webhooks) claimed per run"
        )

    def handle(self, *args, once, interval, batch, **options):
        stop = threading.Event()

        def request_stop(signum, frame):
            # Each job's current run finishes (every call has a deadline); nothing new starts.
            self.stderr.write(f"{signal.Signals(signum).name}: stopping after the jobs' current runs")
            stop.set()

        previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            Worker(batch=batch, stop=stop).run(interval=interval, once=once)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
