"""Settings audit/ reads, with their defaults in one place (reviewer/settings.py may set any of them)."""

from pathlib import Path

from django.conf import settings


def export_dir() -> Path:
    """Where finished exports are kept until downloaded (AUDIT_EXPORT_DIR, default <data>/exports)."""
    return Path(getattr(settings, "AUDIT_EXPORT_DIR", "") or Path(settings.DATA_DIR) / "exports")


def export_tick_seconds() -> float:
    """How long one call of run_pending_exports() may work before it hands the worker back."""
    return float(getattr(settings, "AUDIT_EXPORT_TICK_SECONDS", 1.0))


def export_stale_seconds() -> int:
    """A running export without progress for this long belonged to a worker that died: it is retried."""
    return int(getattr(settings, "AUDIT_EXPORT_STALE_SECONDS", 300))


def stream_max_events() -> int:
    """CSV and JSON Lines of at most this many events stream straight to the browser; larger ones run
    in the background with a progress bar."""
    return int(getattr(settings, "AUDIT_EXPORT_STREAM_MAX_EVENTS", 20000))


def metrics_token() -> str:
    """Bearer token for the Prometheus endpoint; empty means the endpoint is off (404)."""
    return getattr(settings, "METRICS_TOKEN", "") or ""


def metrics_cache_seconds() -> int:
    return int(getattr(settings, "AUDIT_METRICS_CACHE_SECONDS", 60))
