"""The database pool's health check, paid only by a connection that may have died: one not taken from
the pool for IDLE_CHECK_SECONDS or more, one the server has written to (or closed) while it sat idle,
and one seen for the first time. A connection taken moments ago is handed out with no round trip.

Why: Django's CONN_HEALTH_CHECKS under its psycopg pool passes `check=ConnectionPool.check_connection`
to the pool (django/db/backends/postgresql/base.py, DatabaseWrapper.pool), an empty query on every
checkout: 8.3% of a loaded Daphne's samples. It is off (reviewer/settings.py), and Django 5.2 passes
`check=` itself, so a `check` of ours in OPTIONS["pool"] is refused (TypeError: a duplicate keyword).
What this module uses instead, all documented:

- Django's `connection_created` signal, sent each time a DatabaseWrapper takes a connection (from the
  pool, with CONN_MAX_AGE 0: every request): `check_taken` decides whether the connection needs a check,
  and notes when it was taken.
- Without a round trip: psycopg's own state (`closed`, `broken`) and whether the socket has anything to
  read (an idle connection is sent nothing; after PostgreSQL restarts, every idle one has the server's
  goodbye or end-of-file waiting). With one, `ConnectionPool.check_connection`, when the connection was
  last taken IDLE_CHECK_SECONDS ago or more (long enough for a silent death: a peer or firewall gone
  without closing), or never. The time since it was last taken is at least the time it sat idle, so this
  checks whenever the idle time may have reached the bound, and sometimes when it has not (a request that
  held it long): never less often than the rule says.
- A connection that fails is given back through Django's own close() (the pool discards a broken
  connection and opens another) and connect() takes the next one, which is checked the same way.

So after a restart no request gets a dead connection (tests/faults/test_processes_die.py), and a busy
process pays nothing per checkout. (psycopg_pool's `reset` callback could note the return instead, but
with one set the pool hands every returned connection to its worker threads: a thread hop per request.)
"""

import select
import threading
import time
import weakref
from typing import TYPE_CHECKING

from django.conf import settings
from psycopg_pool import ConnectionPool

if TYPE_CHECKING:
    import psycopg
    from django.db.backends.base.base import BaseDatabaseWrapper

# The clock; a test replaces it to age a connection without waiting.
clock = time.monotonic


def idle_check_seconds() -> float:
    return getattr(settings, "DB_POOL_CHECK_IDLE_SECONDS", 30)


_last_taken: "weakref.WeakKeyDictionary[psycopg.Connection, float]" = weakref.WeakKeyDictionary()
_guard = threading.Lock()


def _taken(conn: "psycopg.Connection") -> float | None:
    """Seconds since `conn` was last taken from the pool (None: never); it is noted as taken now."""
    now = clock()
    with _guard:
        at = _last_taken.get(conn)
        _last_taken[conn] = now
    return None if at is None else now - at


def _has_input(conn: "psycopg.Connection") -> bool:
    """Whether the server has written to this idle connection (or closed it): no round trip."""
    try:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return True  # no socket to look at: let the check decide


def needs_check(conn: "psycopg.Connection") -> bool:
    """Whether a connection just taken from the pool must be checked with a round trip (and it is noted
    as taken now)."""
    since = _taken(conn)
    if conn.closed or conn.broken:
        return True
    return since is None or since >= idle_check_seconds() or _has_input(conn)


def check_taken(sender: object, connection: "BaseDatabaseWrapper", **kwargs: object) -> None:
    """connection_created's receiver: check the pooled connection Django just took, if it needs it, and
    take another in its place if it fails."""
    if connection.vendor != "postgresql" or "pool" not in connection.settings_dict.get("OPTIONS", {}):
        return
    conn = connection.connection
    if conn is None or not needs_check(conn):
        return
    try:
        ConnectionPool.check_connection(conn)  # one empty round trip
    except Exception:
        if not conn.closed:
            conn.close()  # a broken connection given back is discarded by the pool, which opens another
        connection.close()
        connection.connect()  # the next one is checked the same way (this receiver again)
