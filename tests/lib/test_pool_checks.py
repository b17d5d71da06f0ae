"""The pool's health check (lib/storage/pool_checks.py) on a real PostgreSQL: a connection given back
moments ago is handed out with no round trip, one not taken for DB_POOL_CHECK_IDLE_SECONDS is checked
with one, and one the server closed while it sat in the pool is replaced before anyone queries it.

Each test has a pool of its own with one connection (a DatabaseWrapper on the test database under an
alias of its own, configured as reviewer/settings.py configures the default's), so every checkout takes
the same connection. The clock is the module's, moved by the test instead of waited for. The round trips
counted are the checks (psycopg_pool's ConnectionPool.check_connection, run for real, counted on the
way); Django's own queries are counted with CaptureQueriesContext."""

import pytest
from django.db import connection
from django.db.utils import load_backend
from django.test.utils import CaptureQueriesContext
from psycopg_pool import ConnectionPool

from lib.storage import pool_checks

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql" or "pool" not in connection.settings_dict.get("OPTIONS", {}),
        reason="the pool is PostgreSQL's (DATABASE_URL postgres://, DB_POOL_MAX_SIZE > 0)",
    ),
]


@pytest.fixture
def now(monkeypatch) -> list[float]:
    """The module's clock, [seconds]: a test moves it forward."""
    clock = [1000.0]
    monkeypatch.setattr(pool_checks, "clock", lambda: clock[0])
    return clock


@pytest.fixture
def checks(monkeypatch) -> list:
    """The connections checked with a round trip, in order (the real check runs)."""
    checked: list = []
    real = ConnectionPool.check_connection

    def counted(conn):
        checked.append(conn)
        real(conn)

    monkeypatch.setattr(ConnectionPool, "check_connection", staticmethod(counted))
    return checked


@pytest.fixture
def pooled(settings):
    """A DatabaseWrapper on the test database with a pool of one connection, checked as deployed."""
    settings.DB_POOL_CHECK_IDLE_SECONDS = 30
    settings_dict = {
        **connection.settings_dict,
        "OPTIONS": {
            **connection.settings_dict["OPTIONS"],
            "pool": {"min_size": 1, "max_size": 1, "timeout": 10},
        },
    }
    wrapper = load_backend(settings_dict["ENGINE"]).DatabaseWrapper(settings_dict, "pool-checks-test")
    yield wrapper
    wrapper.close()
    wrapper.close_pool()


def give_back(wrapper) -> None:
    """Close the wrapper's connection: the pool has it back when this returns."""
    wrapper.close()


def backend_pid(wrapper) -> int:
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def test_a_connection_returned_moments_ago_is_not_checked_and_one_idle_past_the_threshold_is(
    pooled, now, checks
):
    pooled.ensure_connection()
    first = pooled.connection
    assert checks == [first]  # never seen before: checked once
    give_back(pooled)

    now[0] += 29  # taken less than DB_POOL_CHECK_IDLE_SECONDS ago
    with CaptureQueriesContext(pooled) as queries:
        pooled.ensure_connection()
    assert pooled.connection is first
    assert checks == [first] and len(queries) == 0  # no round trip at all on the way out
    give_back(pooled)

    now[0] += 30  # taken as long ago as the threshold
    pooled.ensure_connection()
    assert pooled.connection is first
    assert checks == [first, first]
    pooled.close()


def test_a_connection_the_server_closed_while_idle_is_replaced_before_it_is_used(pooled, now, checks):
    """As after a PostgreSQL restart, without one: its backend is ended while it sits in the pool. It was
    given back moments ago, but the server's goodbye waits on its socket: checked, found dead, replaced."""
    old_pid = backend_pid(pooled)
    dead = pooled.connection
    give_back(pooled)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [old_pid])
    with connection.cursor() as cursor:  # the backend exits a moment after the signal
        while True:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [old_pid])
            if cursor.fetchone()[0] == 0:
                break

    assert backend_pid(pooled) != old_pid  # the query ran on a new connection, no error
    assert checks[-2] is dead and pooled.connection is not dead
