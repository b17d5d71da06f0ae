"""Waking the workers' audit sequencers when events were accepted (AUDIT_SEQUENCING = "worker").

The appending process calls `wake_sequencers()` after its commit, on its after-commit thread
(lib/commit_hooks.py), where one queued call covers every commit before it: one `NOTIFY
reviewer_audit` for many changes, in a transaction of its own. Not inside the appending transaction:
PostgreSQL serializes the commits of transactions that NOTIFY (a database-wide lock held through the
commit's flush), which would make concurrent writers wait for each other's fsync.

Waking is only a hint, as for the outbox: a wake-up lost with its process (killed between its commit
and the NOTIFY) costs one poll interval, after which the worker's sequencer looks anyway. On SQLite
the sequencer only polls.
"""

import logging

from audit import storage

log = logging.getLogger(__name__)

CHANNEL = "reviewer_audit"


def wake_sequencers() -> None:
    """Tell every listening sequencer that events are pending (outside any transaction). Never raises:
    the poll is the safety net."""
    try:
        storage.wake(CHANNEL)
    except Exception:
        log.exception("waking the audit sequencers failed; they chain on their next poll")
