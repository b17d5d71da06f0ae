"""The worker's audit sequencer: a thread of `run_worker` that chains pending events in batches.

With AUDIT_SEQUENCING = "worker" the HTTP processes only accept events (an insert each, pending) and
wake the workers after commit (audit/chain/wakeup.py); this thread chains them, woken by that
NOTIFY, and at least every `interval` seconds in any case (the safety net for a lost wake-up, and the
only trigger on SQLite). Its first pass chains everything left pending while no worker ran.

Several workers run side by side safely: each pass locks the chain head (SELECT ... FOR UPDATE) and
reads the pending events after taking it, so an event is sealed once, by whichever sequencer got there
first (audit/chain/sequencer.py `sequence_chain`).
"""

import logging
import threading

from django.db import close_old_connections, connection

from audit.chain.sequencer import sequence_pending
from audit.chain.wakeup import CHANNEL
from lib.storage.pg_listen import PostgresListener

log = logging.getLogger(__name__)

# After a wake-up the thread waits this long for more before its pass: under load every commit wakes it,
# and one pass (its head lock, its reads, its commit) then chains the events of several commits instead
# of each commit's alone. Nothing waits for a seal in a request; exports flush what they read.
GATHER_SECONDS = 0.05


class SequencerThread:
    def __init__(self, stop: threading.Event, *, interval: float):
        self.stop = stop
        self.interval = interval
        self.first_pass = threading.Event()  # set once everything pending at start is chained (or failed)
        self.passes = 0
        self._passed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="audit-sequencer", daemon=True)

    def start(self) -> "SequencerThread":
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def wait_for_passes(self, count: int, timeout: float) -> bool:
        """Wait until `count` passes have finished in all (tests: a pass that began after a commit)."""
        with self._passed:
            return self._passed.wait_for(lambda: self.passes >= count, timeout)

    def _run(self) -> None:
        listener = self._listen()
        try:
            while not self.stop.is_set():
                self._pass()
                listener = self._wait(listener)
        finally:
            self.first_pass.set()  # (stopped before its first pass: nobody waits for it in vain)
            if listener is not None:
                listener.close()
            close_old_connections()

    def _pass(self) -> None:
        try:
            close_old_connections()  # a long-lived thread must not keep a connection the database dropped
            sequence_pending()
        except Exception:  # logged; the events stay pending for the next pass
            log.exception("audit sequencer pass failed")
        finally:
            self.first_pass.set()
            with self._passed:
                self.passes += 1
                self._passed.notify_all()

    def _listen(self) -> PostgresListener | None:
        if connection.vendor != "postgresql":
            return None
        try:
            return PostgresListener(CHANNEL)
        except Exception:  # waking is an optimisation: the thread polls without it
            log.exception("audit sequencer: no wake-ups (polling only)")
            return None

    def _wait(self, listener: PostgresListener | None) -> PostgresListener | None:
        """Wait up to `interval` for a wake-up, in slices of at most a second so a stop is seen soon."""
        remaining = self.interval
        while remaining > 0 and not self.stop.is_set():
            slice_seconds = min(remaining, 1.0)
            if listener is None:
                self.stop.wait(slice_seconds)
            else:
                try:
                    if listener.wait(slice_seconds, gather=GATHER_SECONDS):
                        return listener
                except Exception:
                    log.exception("audit sequencer wake-up failed; listening again")
                    listener.close()
                    listener = self._listen()
                    self.stop.wait(slice_seconds)  # not a hot loop while the database is away
            remaining -= slice_seconds
        return listener
