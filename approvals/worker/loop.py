"""The delivery worker: the jobs of approvals/worker/jobs.py, each on a thread of its own.

`Worker.run()` (`manage.py run_worker`) starts one thread per job and the audit sequencer's thread.
Each job thread runs its job, then waits for its interval (the deliver_outbox job: also for a
committed message's wake-up), and again, until the worker stops; a job that raises is logged and runs
again at its next interval. So a job that fails or waits on a slow target never stops or delays
another: a continuation is never queued behind a Slack post, an e-mail, a web push, a webhook or the
SIEM stream. `Worker.tick()` (`run_worker --once`, and the tests) runs every job once, in the table's
order, in the calling thread; each job runs even if an earlier one failed.

A decision's continuation is sent by the process that committed it, right after the commit
(approvals/worker/delivery.py); the worker is its retry path. Several workers (and the direct send) may
run side by side: claims never overlap (SKIP LOCKED on PostgreSQL, a lease written with compare-and-set
everywhere), and every message is idempotent on the agent's side anyway.
"""

import logging
import threading
import time
from datetime import datetime

from django.db import close_old_connections, connection

from approvals import wakeup
from approvals.worker.jobs import JOBS, Job, JobContext, Lanes, interval_of, threads_for_lanes
from approvals.worker.report import TickReport
from audit.chain.sequencer_thread import SequencerThread

__all__ = ["POLL_SECONDS", "TickReport", "Worker"]

log = logging.getLogger(__name__)

# The safety-net interval of the jobs with no interval of their own: expiry, retries whose backoff
# ended, reconciliation, and any wake-up that was lost. New messages do not wait for it (approvals/wakeup.py).
POLL_SECONDS = 2.0
# How long a stopping worker waits for its job threads in all (each call has its own deadline; the
# threads are daemons: one still in a call when this ends goes with the process).
STOP_WAIT_SECONDS = 30


class Worker:
    def __init__(self, *, batch: int = 20, stop: threading.Event | None = None):
        self.batch = batch
        self.stop = stop or threading.Event()
        self.context = JobContext(stop=self.stop, batch=batch)
        # Set once run() listens for wake-ups and the jobs that gate the start ran once (tests and
        # benchmarks wait for it before they commit what they expect to be woken for).
        self.listening = threading.Event()
        self.sequencer: SequencerThread | None = None  # run() starts it; a lone tick sequences itself

    # --- every job once ---------------------------------------------------------------------------

    def tick(self, now: datetime | None = None) -> TickReport:
        """Every job once, in the table's order, here; then the audit events the jobs wrote are chained
        (when no sequencer thread does it)."""
        if not connection.in_atomic_block:  # (tests run a tick inside their transaction)
            close_old_connections()  # a long-lived process must not keep a connection the database dropped
        report = TickReport()
        for job in (*JOBS, *(j for j in JOBS if j.name == "sequence_audit")):
            run_once(job, self.context, report, now)
        return report

    # --- the job threads --------------------------------------------------------------------------

    def run(self, *, interval: float = POLL_SECONDS, once: bool = False) -> None:
        if once:
            self.tick()
            return
        self.context.lanes = Lanes.with_threads(threads_for_lanes())
        self.sequencer = SequencerThread(self.stop, interval=interval).start()
        self.context.sequencer_running = True
        threads = [JobThread(job, self.context, interval) for job in JOBS if job.own_thread]
        try:
            for thread in threads:
                thread.start()
            # Started means caught up: what was left pending while no worker ran is chained and
            # delivered by now, and a commit from here on wakes the outbox job.
            self.sequencer.first_pass.wait()
            for thread in threads:
                if thread.job.gates_start:
                    thread.first_run.wait()
            self.listening.set()
            log.info(
                "worker started (%d jobs, interval %.1fs, batch %d)", len(threads) + 1, interval, self.batch
            )
            while not self.stop.wait(1.0):  # (in slices: the main thread takes SIGTERM between them)
                pass
        finally:
            self.stop.set()  # (also when starting failed: every thread ends with it)
            deadline = time.monotonic() + STOP_WAIT_SECONDS  # one wait for all: they end side by side
            for thread in threads:
                thread.join(max(deadline - time.monotonic(), 0))
            self.sequencer.join(timeout=max(deadline - time.monotonic(), 0))
            self.context.lanes.close()
        log.info("worker stopped")


def run_once(job: Job, context: JobContext, report: TickReport, now: datetime | None) -> bool:
    """Run the job; True if it asks to run again at once. A failure is logged and noted in the report."""
    try:
        return bool(job.run(context, report, now))
    except Exception as error:  # one failing job must not stop the others or its own next run
        log.exception("worker job %s failed", job.name)
        report.errors.append(f"{job.name}: {error!r}")
        return False


class JobThread:
    """One job, run again and again on a thread of its own until the worker stops."""

    def __init__(self, job: Job, context: JobContext, interval: float):
        self.job = job
        self.context = context
        self.stop = context.stop
        self.interval = interval_of(job, interval)
        self.first_run = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"job-{job.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        bell = wakeup.doorbell(self.stop) if self.job.woken else None
        try:
            while not self.stop.is_set():
                close_old_connections()  # a long-lived thread must not keep a connection the database dropped
                try:
                    again = run_once(self.job, self.context, TickReport(), None)
                finally:
                    self.first_run.set()
                    close_old_connections()  # returned to the pool (or closed) between runs
                if not again:
                    bell = self._wait(bell)
        finally:
            self.first_run.set()  # (stopped before its first run: nobody waits for it in vain)
            if bell is not None:
                bell.close()

    def _wait(self, bell):
        """Wait for the job's interval, or its wake-up, in slices of at most a second so a stop is seen
        soon. A broken doorbell (the listening connection dropped) is replaced by a new one."""
        remaining = self.interval
        while remaining > 0 and not self.stop.is_set():
            slice_seconds = min(remaining, 1.0)
            if bell is None:
                self.stop.wait(slice_seconds)
            else:
                try:
                    if bell.wait(slice_seconds):
                        return bell
                except Exception:
                    log.exception("worker wake-up failed; listening again")
                    bell.close()
                    bell = wakeup.doorbell(self.stop)
                    self.stop.wait(slice_seconds)  # not a hot loop while the database is away
            remaining -= slice_seconds
        return bell
