"""One row per worker process, moved forward at the end of each of its ticks: how a Daphne's /readyz,
`manage.py worker_health` and /metrics tell that the worker keeps running.

A heartbeat is a fact about a process, not about a proposal or a person: it is written with
update_or_create outside the services and has no audit event (one every tick would bury the trail)."""

from django.db import models


class WorkerHeartbeat(models.Model):
    host = models.CharField(max_length=255)  # socket.gethostname(): a pod's or a machine's name
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()  # the process's first tick
    ticked_at = models.DateTimeField()  # the end of its last tick

    class Meta:
        constraints = [models.UniqueConstraint(fields=["host", "pid"], name="one_heartbeat_per_worker")]
        indexes = [models.Index(fields=["ticked_at"], name="heartbeats_by_tick")]

    def __str__(self) -> str:
        return self.name

    @property
    def name(self) -> str:
        return f"{self.host}:{self.pid}"
