"""The one way tests wait: poll a condition until it holds, with a deadline (never a bare sleep)."""

import asyncio
import time
from collections.abc import Awaitable, Callable


def _timed_out(what: str, timeout: float, detail: Callable[[], str] | None) -> AssertionError:
    extra = detail() if detail else ""
    return AssertionError(f"{what}: not within {timeout}s" + (f"\n{extra}" if extra else ""))


def wait_until(
    condition: Callable[[], object],
    what: str = "condition",
    *,
    timeout: float = 10,
    interval: float = 0.05,
    detail: Callable[[], str] | None = None,
):
    """Call condition() until it returns something truthy and return that; after `timeout` seconds fail
    naming `what` (plus detail(), e.g. a server log). A condition may raise to stop waiting early."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout, detail)
        time.sleep(interval)  # poll interval, bounded by the deadline


async def wait_until_async(
    condition: Callable[[], Awaitable[object]],
    what: str = "condition",
    *,
    timeout: float = 10,
    interval: float = 0.05,
    detail: Callable[[], str] | None = None,
):
    """wait_until for a coroutine condition, without blocking the event loop."""
    deadline = time.monotonic() + timeout
    while True:
        value = await condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout, detail)
        await asyncio.sleep(interval)  # poll interval, bounded by the deadline
