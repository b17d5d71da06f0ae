"""Refinements of `transaction.on_commit`, built on its documented behaviour only: a hook registered in a
transaction runs once it commits, in the order hooks were registered; a hook registered inside a
savepoint that rolls back, or in a transaction that rolls back, never runs (Django then drops it);
outside a transaction it runs at once.

Every refinement registers each of its hooks with `transaction.on_commit` (one wrapper per hook), so
Django alone decides what survives a rollback. What this module adds is read from the wrappers, never
from Django's own list: it holds a weak reference to each wrapper it handed over, and a wrapper that
Django has dropped is gone (nothing else refers to it), so "will this hook still run?" is answered by
whether the weak reference is alive. That gives:

- `on_commit_once(key, hook)`: no second wrapper for a key while one is still scheduled (alive and
  not run), so one hook per key runs per commit. A wrapper dropped by a rolled-back savepoint is dead,
  so the next call registers a new one (the hook runs if any call of it survived); one left by a
  transaction that rolled back entirely is dead too, so it never suppresses the next transaction's.
- `on_commit_first(hook)`: runs before the hooks registered earlier in the transaction through this
  module. Every wrapper of this module first runs the "first" hooks registered after it that are still
  scheduled, latest first, then its own. Django's order is untouched; hooks registered with
  `transaction.on_commit` directly are not reordered, so callers in this codebase register through
  `on_commit()` here.

A wrapper outlives Django's reference only where something else holds it: a test's list of captured
callbacks, or the traceback of a hook that raised without `robust` (it keeps the commit's unrun hooks
until collected). Until then they count as scheduled on that connection: a key among them is not
registered again, a "first" hook among them runs at the next commit. So every hook registered through
here in this codebase is robust or catches its own failure.

Why the ordering is kept. With COMMIT_HOOKS_IN_BACKGROUND on (the default), the slow hooks of a change
(the audit sequencer, the sockets' broadcasts) already defer: theirs only hand work to the after-commit
thread, microseconds each, so a decision's direct send would barely wait behind them. The ordering
still matters where they run in the committing thread (COMMIT_HOOKS_IN_BACKGROUND off: the test suite,
and a deployment that turns it off), where each takes round trips; and it is how a test stops a process
between its COMMIT and the direct send (tests/e2e/test_direct_send.py). It costs one list per
connection and transaction, so it stays.

Hooks run on the committing thread unless handed to the after-commit thread
(`on_commit_in_background`)."""

import asyncio
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable, Hashable
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, close_old_connections, connections, transaction

log = logging.getLogger(__name__)

Hook = Callable[[], object]


class _Token:
    """One hook handed to Django through its wrapper, which only Django refers to."""

    __slots__ = ("hook", "robust", "ran", "wrapper")

    def __init__(self, hook: Hook, robust: bool):
        self.hook = hook
        self.robust = robust
        self.ran = False
        self.wrapper: weakref.ref | None = None

    def scheduled(self) -> bool:
        """Will run at commit: not run yet, and Django still holds its wrapper."""
        return not self.ran and self.wrapper is not None and self.wrapper() is not None

    def run(self) -> None:
        if self.ran:
            return
        self.ran = True
        if not self.robust:
            self.hook()
            return
        try:
            self.hook()
        except Exception:
            log.exception("on-commit hook %s failed", getattr(self.hook, "__qualname__", self.hook))


class _Pending:
    """This module's hooks of one connection's open transaction (entries of earlier transactions that
    rolled back are dead, and are replaced or pruned)."""

    __slots__ = ("by_key", "first")

    def __init__(self):
        self.by_key: dict[Hashable, _Token] = {}
        self.first: list[_Token] = []


_pending: "weakref.WeakKeyDictionary[object, _Pending]" = weakref.WeakKeyDictionary()
_pending_guard = threading.Lock()


def _pending_of(connection) -> _Pending:
    with _pending_guard:
        pending = _pending.get(connection)
        if pending is None:
            pending = _pending[connection] = _Pending()
        return pending


def _in_transaction(using: str | None) -> bool:
    # As on_commit decides: outside atomic() it runs the hook at once (or refuses, under manual
    # transaction management), so this module's refinements have nothing to do.
    return connections[using or DEFAULT_DB_ALIAS].in_atomic_block


def _hand_over(token: _Token, pending: _Pending, using: str | None, key: Hashable = None) -> None:
    """Register one wrapper of `token` with Django."""

    def wrapper() -> None:
        if pending.first:
            _run_first_hooks(pending)
        token.run()
        if key is not None and pending.by_key.get(key) is token:
            del pending.by_key[key]

    token.wrapper = weakref.ref(wrapper)
    # Not robust at Django's level: a robust token logs its own failure (it may run from another
    # wrapper, see _run_first_hooks), a non-robust one fails the commit's later hooks, as on_commit's.
    transaction.on_commit(wrapper, using=using)


def _run_first_hooks(pending: _Pending) -> None:
    """Run the "first" hooks still scheduled, latest registration first."""
    first, pending.first = pending.first, []
    for token in reversed(first):
        if token.scheduled():
            token.run()


def on_commit(hook: Hook, *, robust: bool = False, using: str | None = None) -> None:
    """transaction.on_commit, taking part in this module's ordering (see on_commit_first)."""
    if not _in_transaction(using):
        transaction.on_commit(hook, using=using, robust=robust)
        return
    _hand_over(_Token(hook, robust), _pending_of(connections[using or DEFAULT_DB_ALIAS]), using)


def on_commit_first(hook: Hook, *, robust: bool = True, using: str | None = None) -> None:
    """on_commit, but run before the hooks registered earlier in the transaction through this module (a
    hand-off that takes microseconds should not wait behind hooks that take round trips)."""
    if not _in_transaction(using):
        transaction.on_commit(hook, using=using, robust=robust)
        return
    pending = _pending_of(connections[using or DEFAULT_DB_ALIAS])
    token = _Token(hook, robust)
    pending.first = [t for t in pending.first if t.scheduled()]
    pending.first.append(token)
    _hand_over(token, pending, using)


def on_commit_once(key: Hashable, hook: Hook, *, robust: bool = False, using: str | None = None) -> None:
    """on_commit, unless a hook with this key will already run when the transaction commits (one hook
    per transaction for work that covers every call of it, e.g. chaining the audit events it added).
    Across a savepoint that rolled back, the hook runs if any call of it survived."""
    if not _in_transaction(using):
        transaction.on_commit(hook, using=using, robust=robust)
        return
    pending = _pending_of(connections[using or DEFAULT_DB_ALIAS])
    token = pending.by_key.get(key)
    if token is not None and token.scheduled():
        return
    token = pending.by_key[key] = _Token(hook, robust)
    _hand_over(token, pending, using, key)


def on_commit_in_background(hook: Hook, *, key: Hashable = None) -> None:
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
            on_commit(hook, robust=True)
        else:
            on_commit_once(key, hook, robust=True)
        return
    if key is None:
        on_commit(lambda: _background.submit(None, hook), robust=True)
    else:
        on_commit_once(key, lambda: _background.submit(key, hook), robust=True)


_thread_state = threading.local()


def run_async(make: Callable[[], Awaitable[object]]) -> None:
    """Run the coroutine `make()` to its end from synchronous code. On the after-commit thread, on that
    thread's own event loop, kept for the thread's life: a channel layer's Redis connections belong to
    the loop they were opened on, so one loop keeps one connection where async_to_sync would start a
    thread, a loop and a connection for every call. Anywhere else through async_to_sync (in a thread
    of an asgiref sync_to_async, on its caller's loop)."""
    loop = getattr(_thread_state, "loop", None)
    if loop is None:
        async_to_sync(make)()
    else:
        loop.run_until_complete(make())


def _give_this_thread_a_loop() -> None:
    _thread_state.loop = asyncio.new_event_loop()


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
                self._pool = ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="after-commit", initializer=_give_this_thread_a_loop
                )
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
