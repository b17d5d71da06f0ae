"""One lane per kind of outbound call the worker makes for people (Slack workspaces, Teams channels,
webhook endpoints): bounded concurrency and a back-off per target, so one slow or dead target holds
back neither the other targets of its kind nor any other kind.

- Each target's items go out in order on one thread of the lane's pool, at most `threads` targets at
  once (NOTIFY_THREADS): a target that never answers holds one thread, for one call's timeout
  (NOTIFY_CONNECT_TIMEOUT_SECONDS, NOTIFY_READ_TIMEOUT_SECONDS), never the lane.
- A target whose call failed (no answer, refused, an error status) is in back-off: its remaining items
  of the round are handed back unsent and the next rounds leave it out, for
  NOTIFY_TARGET_BACKOFF_SECONDS, doubling at each further failure up to
  NOTIFY_TARGET_BACKOFF_CAP_SECONDS; its first success ends it. What waits for it stays due in the
  database (posts, outbox rows): nothing is dropped, each is tried again once the back-off ended.

The back-off is this process's memory (another worker learns a target is down from its own first
failure): a wrong guess costs one call's timeout, never a message.

With `threads=0` a lane sends in the caller's thread, one target after another (a single tick, and the
tests, which run a tick inside their transaction).
"""

import logging
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Generic, TypeVar

from django.conf import settings
from django.db import close_old_connections

log = logging.getLogger(__name__)

Item = TypeVar("Item")
Target = TypeVar("Target", bound=Hashable)


@dataclass
class _Failing:
    failures: int
    until: float  # time.monotonic() when the target is tried again


class TargetBackoff:
    """Which targets failed lately, and until when each is left out."""

    def __init__(self, *, first: float, cap: float, clock: Callable[[], float] = time.monotonic):
        self.first, self.cap, self.clock = first, cap, clock
        self._failing: dict[Hashable, _Failing] = {}
        self._lock = threading.Lock()

    def skipped(self) -> set:
        """The targets in back-off now."""
        now = self.clock()
        with self._lock:
            return {target for target, failing in self._failing.items() if failing.until > now}

    def failed(self, target: Hashable) -> float:
        """Record a failure; returns the seconds the target is now left out."""
        with self._lock:
            failures = self._failing[target].failures + 1 if target in self._failing else 1
            seconds = min(self.first * 2 ** (failures - 1), self.cap)
            self._failing[target] = _Failing(failures, self.clock() + seconds)
        return seconds

    def succeeded(self, target: Hashable) -> None:
        with self._lock:
            self._failing.pop(target, None)

    def seconds_left(self, target: Hashable) -> float:
        with self._lock:
            failing = self._failing.get(target)
        return max(failing.until - self.clock(), 0.0) if failing else 0.0


class Lane(Generic[Item]):
    def __init__(self, kind: str, *, threads: int):
        self.kind = kind
        self.threads = threads
        self.backoff = TargetBackoff(
            first=settings.NOTIFY_TARGET_BACKOFF_SECONDS, cap=settings.NOTIFY_TARGET_BACKOFF_CAP_SECONDS
        )
        self._pool = (
            ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"notify-{kind}") if threads else None
        )

    def run(self, work: dict[Target, list[Item]], send: Callable[[Item], bool]) -> list[Item]:
        """Send each target's items, the targets side by side; `send(item)` returns False when the
        target failed (the item's own failure is recorded by `send`). Returns, once every target's turn
        ended, the items left unsent because their target failed or is in back-off."""
        skipped = self.backoff.skipped()
        left = [item for target, items in work.items() if target in skipped for item in items]
        turns = [(target, items) for target, items in work.items() if target not in skipped]
        if self._pool is None:
            for target, items in turns:
                left += self._turn(target, items, send)
            return left
        futures = [self._pool.submit(self._pooled_turn, target, items, send) for target, items in turns]
        wait(futures)
        for future in futures:
            left += future.result()
        return left

    def _pooled_turn(self, target: Hashable, items: list[Item], send: Callable[[Item], bool]) -> list[Item]:
        try:
            return self._turn(target, items, send)
        finally:
            close_old_connections()  # a pool thread obeys CONN_MAX_AGE as a request's thread does

    def _turn(self, target: Hashable, items: list[Item], send: Callable[[Item], bool]) -> list[Item]:
        for position, item in enumerate(items):
            try:
                answered = send(item)
            except Exception:  # the item's own problem (a bug, a bad row): the target is not to blame
                log.exception("%s: sending to %s failed", self.kind, target)
                continue
            if not answered:
                seconds = self.backoff.failed(target)
                log.warning("%s: %s failed; left out for %.0fs", self.kind, target, seconds)
                return items[position + 1 :]
            self.backoff.succeeded(target)
        return []

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
