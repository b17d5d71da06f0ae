"""Let Django's test flush through the append-only triggers on PostgreSQL.

Transactional tests (django_db(transaction=True), transactional_db, live_server) end with Django's flush:
one TRUNCATE of every table, which the audit triggers refuse, as they must for the application. The
flush is wrapped so that its own connection switches triggers off (`session_replication_role =
replica`, superuser only) for the flush alone and back on right after it, on the very connection that
flushed, whether or not Django closes it then.

An earlier version switched them off from a fixture's teardown and relied on Django closing that
connection after the flush; some connection survived, and under pytest-xdist the tests that a worker ran
next (hundreds of them) had the audit triggers off, so the owner-attack tests, which need the triggers,
did not raise. tests/conftest.py calls `let_the_test_flush_through_audit_triggers()` once.
"""

import functools

from django.db import connections
from django.test import TransactionTestCase


def _set_triggers(flushed_connections, role: str) -> None:
    for connection in flushed_connections:
        if connection.connection is not None or role == "replica":  # replica: connect if need be
            with connection.cursor() as cursor:
                cursor.execute(f"SET session_replication_role = {role}")


def let_the_test_flush_through_audit_triggers() -> None:
    original = TransactionTestCase._fixture_teardown
    if getattr(original, "flushes_through_audit_triggers", False):
        return

    @functools.wraps(original)
    def fixture_teardown(self):
        names = self._databases_names(include_mirrors=False)
        postgres = [connections[name] for name in names if connections[name].vendor == "postgresql"]
        _set_triggers(postgres, "replica")
        try:
            original(self)
        finally:
            _set_triggers(postgres, "origin")

    fixture_teardown.flushes_through_audit_triggers = True
    TransactionTestCase._fixture_teardown = fixture_teardown
