"""The worker's heartbeat: written at the end of every tick (approvals/worker/loop.py), read by the
readiness check, `manage.py worker_health` and /metrics.

Imports nothing of ours but its model, so the worker can call it without depending on the checks."""

import os
import socket
from datetime import datetime, timedelta

from django.db.models import Max
from django.utils import timezone

from health.models import WorkerHeartbeat

# A worker that has not ticked for this long has stopped: its row is removed (its gauge disappears).
FORGET_AFTER = timedelta(hours=1)
_started_at: datetime | None = None


def record_tick() -> None:
    """This process finished a tick now. Wall-clock time, whatever clock the tick ran on: it says the
    process is alive, and tests tick with a fake one."""
    global _started_at
    now = timezone.now()
    first = _started_at is None
    if first:
        _started_at = now
    WorkerHeartbeat.objects.update_or_create(
        host=socket.gethostname(),
        pid=os.getpid(),
        defaults={"ticked_at": now},
        create_defaults={"ticked_at": now, "started_at": _started_at},
    )
    if first:  # once per process: what a stopped worker left behind
        WorkerHeartbeat.objects.filter(ticked_at__lt=now - FORGET_AFTER).delete()


def newest_tick(*, host: str | None = None, pid: int | None = None) -> datetime | None:
    """When the most recent tick of any worker (or of the one on `host`, with `pid`) ended; None if none."""
    beats = WorkerHeartbeat.objects.all()
    if host is not None:
        beats = beats.filter(host=host)
    if pid is not None:
        beats = beats.filter(pid=pid)
    return beats.aggregate(newest=Max("ticked_at"))["newest"]


def tick_ages(now: datetime) -> dict[str, float]:
    """Seconds since the last tick of each worker that ticked within FORGET_AFTER, by "host:pid"."""
    beats = WorkerHeartbeat.objects.filter(ticked_at__gte=now - FORGET_AFTER).order_by("host", "pid")
    return {beat.name: max((now - beat.ticked_at).total_seconds(), 0.0) for beat in beats}
