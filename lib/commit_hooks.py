"""Refinements of `transaction.on_commit`, in one place because they read Django's list of the
open transaction's hooks (`connection.run_on_commit`: (savepoint ids, hook, robust) in the order they
were registered; rolling back a savepoint drops the hooks registered inside it, so the list is always
what will run). Outside a transaction they run the hook at once, as on_commit does (the background
one hands it to its thread at once)."""

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import close_old_connections, transaction

log = logging.getLogger(__name__)


def on_commit_first(hook, *, robust: bool = True) -> None:
    """on_commit, but run before the hooks registered earlier in the transaction (a hand-off that takes
    microseconds should not wait behind hooks that take round trips)."""
    connection = transaction.get_connection()
    transaction.on_commit(hook, robust=robust)
    hooks = getattr(connection, "run_on_commit", None)
    if connection.in_atomic_block and isinstance(hooks, list) and len(hooks) > 1:
        hooks.insert(0, hooks.pop())


def on_commit_once(key, hook, *, robust: bool = False) -> None:
    """on_commit, unless a hook with this key will already run when the transaction commits (one hook
    per transaction for work that covers every call of it, e.g. chaining the audit events it added)."""
    connection = transaction.get_connection()
    hooks = getattr(connection, "run_on_commit", None)
    if connection.in_atomic_block and isinstance(hooks, list):
        registered = (entry[1] for entry in hooks if isinstance(entry, tuple) and len(entry) > 1)
        if any(getattr(func, "commit_hook_key", None) == key for func in registered):
            return
    hook.commit_hook_key = key
    transaction.on_commit(hook, robust=robust)


def on_commit_in_background(hook, *, key=None) -> None:
    """on_commit, but the hook runs on this process's after-commit thread, so the committing request
    answers without waiting for it. For work whose loss in a crash something else repairs (the audit
    sequencer: the worker's tick chains what is pending; broadcasts: hints, re-read on reconnect).

    With a `key`, one hook per transaction (as on_commit_once), and one queued run per key at a time:
    a run that has not started yet covers every commit before it (the sequencer chains everything
    pending), so later commits with the same key add nothing to the queue. Off
    (`COMMIT_HOOKS_IN_BACKGROUND = False`, as in the test suite) the hook runs after commit in the
    committing thread, as on_commit does."""
    if not settings.COMMIT_HOOKS_IN_BACKGROUND:
        if key is None:
            transaction.on_commit(hook, robust=True)
        else:
            on_commit_once(key, hook, robust=True)
        return
    if key is None:
        transaction.on_commit(lambda: _background.submit(None, hook), robust=True)
    else:
        on_commit_once(key, lambda: _background.submit(key, hook), robust=True)


class _AfterCommitThread:
    """One thread per process runs the hooks handed to it, in order."""

    def __init__(self):
        self._lock = threading.Lock()
        self._queued: set = set()
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, key, hook) -> None:
        with self._lock:
            if key is not None:
                if key in self._queued:
                    return  # a run not started yet covers this commit too
                self._queued.add(key)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="after-commit")
            pool = self._pool
        pool.submit(self._run, key, hook)

    def _run(self, key, hook) -> None:
        if key is not None:
            with self._lock:
                self._queued.discard(key)  # before the run: a commit from now on queues the next one
        try:
            hook()
        except Exception:
            log.exception("after-commit hook %s failed", key or hook)
        finally:
            # Its connection obeys CONN_MAX_AGE as a request's does (returned to the pool by default).
            close_old_connections()

    def drain(self) -> None:
        """Wait until every hook handed over so far has run (benchmarks and tests of this thread)."""
        with self._lock:
            pool = self._pool
        if pool is not None:
            pool.submit(lambda: None).result()


_background = _AfterCommitThread()
wait_for_background_hooks = _background.drain
