"""`manage.py run_worker [--once] [--interval SECONDS]`: the delivery and reconciliation loop."""

import signal
import threading

from django.core.management.base import BaseCommand

from approvals.worker.loop import POLL_SECONDS, Worker


class Command(BaseCommand):
    help = "Deliver decisions and cancels to agents, expire what waited too long, reconcile executions."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="run one tick and exit")
        parser.add_argument(
            "--interval",
            type=float,
            default=POLL_SECONDS,
            help=f"seconds between safety-net ticks (default {POLL_SECONDS:g}); "
            "a committed message wakes the worker at once",
        )
        parser.add_argument("--batch", type=int, default=20, help="outbox messages claimed per tick")

    def handle(self, *args, once, interval, batch, **options):
        stop = threading.Event()

        def request_stop(signum, frame):
            # The current delivery finishes (every call has a deadline); nothing new starts.
            self.stderr.write(f"{signal.Signals(signum).name}: stopping after the current step")
            stop.set()

        previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            Worker(batch=batch, stop=stop).run(interval=interval, once=once)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
