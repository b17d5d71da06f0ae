"""What /readyz, /metrics and the deployment's probes check, each against its documented limit
(settings READY_*; docs/operations.md, "Health probes").

This process's own means of serving:
- database: a connection from the pool answers (as the application's role, DATABASE_URL);
- migrations: no migration is left to apply (read once per process until it first holds: the loader
  parses every migration file);
- redis: the channel layer's Redis answers a PING (only when the layer is Redis: REDIS_URL);
- signing_key: the active signing key loads.
Whether the background work keeps up, the same for every process:
- worker: some worker finished a tick within READY_WORKER_TICK_MAX_SECONDS (health/heartbeats.py);
- sequencer: the oldest audit event not chained yet waited at most READY_SEQUENCER_LAG_MAX_SECONDS
  (the query behind the audit page's "events wait to be chained");
- outbox: at most READY_OUTBOX_BACKLOG_MAX messages are due, the oldest due for at most
  READY_OUTBOX_DUE_MAX_SECONDS.
When the database fails, the checks that read it are not run and only "database" is named.
"""

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Count, Min
from django.utils import timezone

import signing_keys
from approvals.models import OutboxMessage
from audit.chain.records import pending_by_chain
from health import heartbeats

LOCAL = ("database", "migrations", "redis", "signing_key")
BACKGROUND = ("worker", "sequencer", "outbox")
CHECKS = LOCAL + BACKGROUND
NEEDS_DATABASE = ("migrations", "worker", "sequencer", "outbox")
REDIS_LAYER = "channels_redis.core.RedisChannelLayer"  # reviewer/fixed_settings.py

_migrations_applied = False  # once true, true for the life of the process (the code cannot change)


@dataclass
class Result:
    name: str
    ok: bool
    seconds: float = 0.0
    details: dict = field(default_factory=dict)


@dataclass
class Readiness:
    results: list[Result]

    @property
    def ready(self) -> bool:
        return all(result.ok for result in self.results)

    @property
    def failing(self) -> list[str]:
        return [result.name for result in self.results if not result.ok and "skipped" not in result.details]

    def body(self, *, with_details: bool) -> dict:
        """The JSON of /readyz: the status and what fails; the measurements only for the metrics token."""
        body: dict = {"status": "ready" if self.ready else "unready"}
        if not self.ready:
            body["failing"] = self.failing
        if with_details:
            body["checks"] = {
                result.name: {"ok": result.ok, "seconds": round(result.seconds, 4), **result.details}
                for result in self.results
            }
        return body


def _timed(name: str, check: Callable[[], tuple[bool, dict]]) -> Result:
    started = time.perf_counter()
    try:
        ok, details = check()
    except Exception as error:  # any failure is the answer, never a 500
        ok, details = False, {"error": _describe(error)}
    return Result(name, ok, time.perf_counter() - started, details)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error)[:200]}".strip()


def _database() -> tuple[bool, dict]:
    connection.ensure_connection()
    return connection.is_usable(), {}


def _migrations() -> tuple[bool, dict]:
    global _migrations_applied
    if not _migrations_applied:
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if plan:
            return False, {"unapplied": len(plan)}
        _migrations_applied = True
    return True, {}


def _signing_key() -> tuple[bool, dict]:
    return True, {"kid": signing_keys.active_key().kid}


def _worker(now: datetime) -> tuple[bool, dict]:
    newest = heartbeats.newest_tick()
    if newest is None:
        return False, {"last_tick_age_seconds": None}
    age = max((now - newest).total_seconds(), 0.0)
    return age <= settings.READY_WORKER_TICK_MAX_SECONDS, {"last_tick_age_seconds": round(age, 3)}


def sequencer_lag(now: datetime) -> tuple[int, float]:
    """Events waiting to be chained (all chains) and the age of the oldest, in seconds (0: none)."""
    waiting = pending_by_chain().values()
    oldest = min((row["oldest"] for row in waiting), default=None)
    return sum(row["count"] for row in waiting), max((now - oldest).total_seconds(), 0.0) if oldest else 0.0


def _sequencer(now: datetime) -> tuple[bool, dict]:
    pending, age = sequencer_lag(now)
    details = {"pending_events": pending, "oldest_pending_seconds": round(age, 3)}
    return age <= settings.READY_SEQUENCER_LAG_MAX_SECONDS, details


def outbox_backlog(now: datetime) -> tuple[int, float]:
    """Outbox messages due now (pending, their next attempt reached) and how long the oldest has been due."""
    due = OutboxMessage.objects.filter(status=OutboxMessage.Status.PENDING, next_attempt_at__lte=now)
    row = due.aggregate(count=Count("pk"), oldest=Min("next_attempt_at"))
    oldest = row["oldest"]
    return row["count"], max((now - oldest).total_seconds(), 0.0) if oldest else 0.0


def _outbox(now: datetime) -> tuple[bool, dict]:
    count, age = outbox_backlog(now)
    ok = count <= settings.READY_OUTBOX_BACKLOG_MAX and age <= settings.READY_OUTBOX_DUE_MAX_SECONDS
    return ok, {"due_messages": count, "oldest_due_seconds": round(age, 3)}


def run_sync_checks(names: tuple[str, ...], now: datetime | None = None) -> list[Result]:
    """Every check of `names` but redis, in this thread."""
    now = now or timezone.now()
    checks: dict[str, Callable[[], tuple[bool, dict]]] = {
        "database": _database,
        "migrations": _migrations,
        "signing_key": _signing_key,
        "worker": lambda: _worker(now),
        "sequencer": lambda: _sequencer(now),
        "outbox": lambda: _outbox(now),
    }
    results: list[Result] = []
    database_ok = True
    for name in names:
        if name not in checks:
            continue
        if name in NEEDS_DATABASE and not database_ok:
            results.append(Result(name, False, details={"skipped": "database"}))
            continue
        result = _timed(name, checks[name])
        database_ok = database_ok and (name != "database" or result.ok)
        results.append(result)
    return results


def _checks_then_close(names: tuple[str, ...], now: datetime | None) -> list[Result]:
    """run_sync_checks on a thread of its own, whose connection then goes back to the pool."""
    try:
        return run_sync_checks(names, now)
    finally:
        connection.close()


def redis_configured() -> bool:
    """Whether the channel layer is channels-redis's (REDIS_URL): then its Redis is checked."""
    return settings.CHANNEL_LAYERS["default"]["BACKEND"] == REDIS_LAYER


async def _redis() -> Result:
    started = time.perf_counter()
    layer: Any = get_channel_layer()  # a RedisChannelLayer (redis_configured()); channels-redis has no types
    try:
        # The layer's own pool for this event loop (RedisChannelLayer.connection): the sockets pages use.
        await asyncio.wait_for(layer.connection(0).ping(), settings.READY_CHECK_TIMEOUT_SECONDS)
        ok, details = True, {}
    except Exception as error:
        ok, details = False, {"error": _describe(error) or "timed out"}
    return Result("redis", ok, time.perf_counter() - started, details)


def selected(exclude: set[str]) -> tuple[str, ...]:
    """The checks to run: all but `exclude` (as Kubernetes' /readyz?exclude=...), redis only if configured."""
    return tuple(name for name in CHECKS if name not in exclude and (name != "redis" or redis_configured()))


async def readiness(names: tuple[str, ...], now: datetime | None = None) -> Readiness:
    """Run the checks `names` (see selected()): Redis on this event loop, the rest in a thread of their
    own, within READY_CHECK_TIMEOUT_SECONDS (past it the database is named: it is what hangs)."""
    sync_names = tuple(name for name in names if name != "redis")
    in_thread = sync_to_async(_checks_then_close, thread_sensitive=False)
    checking = asyncio.ensure_future(in_thread(sync_names, now))
    pinging = asyncio.ensure_future(_redis()) if "redis" in names else None  # meanwhile, on this loop
    try:
        results = await asyncio.wait_for(checking, settings.READY_CHECK_TIMEOUT_SECONDS)
    except TimeoutError:
        timeout = f"no answer within {settings.READY_CHECK_TIMEOUT_SECONDS} s"
        results = [
            # The first check (the database, unless excluded) is named; the rest waited behind it.
            Result(name, False, details={"error": timeout} if i == 0 else {"skipped": sync_names[0]})
            for i, name in enumerate(sync_names)
        ]
    redis = [await pinging] if pinging is not None else []  # bounded by the same timeout (_redis)
    by_name = {result.name: result for result in results + redis}
    return Readiness([by_name[name] for name in names])
