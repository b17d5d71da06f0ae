"""Waking the delivery worker the moment an outbox message is committed: delivery is woken, not polled.

The services call `outbox_message_queued()` inside the transaction that queues a message (a decision
to continue or cancel, a GetTask). The worker's outbox job (approvals/worker/jobs.py `deliver_outbox`)
calls `doorbell()` once and then `wait(timeout)` between its runs: it returns as soon as a message was
committed, or after `timeout` (polling stays, as the safety net for lost wake-ups, retries whose
backoff ends, and expiry).

- PostgreSQL: `NOTIFY reviewer_outbox` inside the transaction. PostgreSQL delivers a notification only
  when (and if) the transaction commits, to every listening worker on any machine. Each worker LISTENs
  on a connection of its own (autocommit, outside Django's, so no transaction is ever held open).
- SQLite (one machine): after commit, a datagram to each worker's doorbell, a Linux abstract Unix
  socket whose name is registered as a file under DATA_DIR/worker-doorbells/ (a worker removes its
  file on exit; a file whose socket is gone is removed by the next ring). Where abstract sockets do
  not exist the worker only polls.

Waking is only a hint. Which worker delivers a message is still decided by the claim
(services.outbox.claim_due_outbox: SKIP LOCKED and a lease), so several woken workers never deliver one
message twice.
"""

import contextlib
import logging
import os
import secrets
import socket
import sys
from pathlib import Path

from django.conf import settings

from lib.commit_hooks import on_commit, on_commit_first
from lib.storage import pg_listen

log = logging.getLogger(__name__)

CHANNEL = "reviewer_outbox"


# --- the sending side (services, inside their transaction) ---------------------------------------


def outbox_message_queued() -> None:
    """Wake the workers once the current transaction commits (never if it rolls back)."""
    if pg_listen.supported():
        pg_listen.notify(CHANNEL)  # delivered at commit
    else:
        on_commit(ring_doorbells, robust=True)


# Set by approvals.delivery (AppConfig.ready): sends a committed continuation from this process. The
# domain (services) may not import the A2A transport, so the transport registers itself here.
_direct_sender = None


def register_direct_sender(sender) -> None:
    """`sender(outbox_message_id)` is called after the commit that queued a continuation (never raises)."""
    global _direct_sender
    _direct_sender = sender


def continuation_queued(outbox_message_id: int) -> None:
    """A decision's continuation was queued in the current transaction: once it commits, send it from
    this process (approvals/worker/delivery.py), or, where that is off, wake the workers as for any message.
    Sent directly, the workers are not woken for it: they are its retry path (a failed send is marked
    for retry; a process that dies between commit and send leaves the row due for the next tick)."""
    sender = _direct_sender
    if sender is None or not settings.OUTBOX_DIRECT_SEND:
        outbox_message_queued()
        return
    # First among the commit's hooks: the hand-off to a sending thread takes microseconds, the audit
    # sequencer's and the broadcasts' hooks of the same change take round trips.
    on_commit_first(lambda: sender(outbox_message_id))


def ring_now() -> None:
    """Wake the workers now, outside any transaction (a committed message this process will not send)."""
    if pg_listen.supported():
        pg_listen.notify(CHANNEL)
    else:
        ring_doorbells()


def _doorbell_folder() -> Path:
    return Path(settings.DATA_DIR) / "worker-doorbells"


def ring_doorbells() -> None:
    """Send one datagram to every registered worker doorbell (SQLite). Never raises."""
    folder = _doorbell_folder()
    if not folder.is_dir():
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.setblocking(False)
        for entry in folder.iterdir():
            try:
                sender.sendto(b"!", b"\0" + entry.read_bytes())
            except BlockingIOError:
                pass  # its queue is full: that worker is already awake
            except (ConnectionRefusedError, FileNotFoundError):
                entry.unlink(missing_ok=True)  # a worker that died without removing its file
            except OSError as error:
                log.debug("doorbell %s: %s", entry.name, error)


# --- the receiving side (the worker) ---------------------------------------------------------------


class PollingOnly:
    """No wake-ups: wait() just sleeps until the timeout (or the stop event)."""

    def __init__(self, stop):
        self.stop = stop

    def wait(self, timeout: float) -> bool:
        self.stop.wait(timeout)
        return False

    def close(self) -> None:
        pass


class UnixDoorbell:
    """An abstract Unix datagram socket registered under DATA_DIR/worker-doorbells/."""

    def __init__(self):
        name = f"reviewer-worker-{os.getpid()}-{secrets.token_hex(8)}"
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.bind(b"\0" + name.encode())
        folder = _doorbell_folder()
        folder.mkdir(parents=True, exist_ok=True)
        self.entry = folder / name
        self.entry.write_text(name)

    def wait(self, timeout: float) -> bool:
        self.socket.settimeout(timeout)
        try:
            self.socket.recv(64)
        except TimeoutError:
            return False
        self.socket.setblocking(False)  # several commits at once: one tick serves them all
        with contextlib.suppress(BlockingIOError):
            while self.socket.recv(64):
                pass
        return True

    def close(self) -> None:
        self.entry.unlink(missing_ok=True)
        self.socket.close()


def doorbell(stop):
    """What the worker waits on between ticks; polling only if no wake-up works here."""
    try:
        if pg_listen.supported():
            return pg_listen.PostgresListener(CHANNEL)
        if sys.platform == "linux":
            return UnixDoorbell()
    except Exception:  # waking is an optimisation: never stop the worker for it
        log.exception("no wake-ups (polling only)")
    return PollingOnly(stop)
