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

The end-to-end modules keep Reviewer's servers running across their tests, so the flush's TRUNCATE can
meet a worker's or sequencer's transaction that holds one table and reads another: PostgreSQL breaks the
deadlock by cancelling one side, at times the flush. The TRUNCATE is one statement in one transaction,
so a cancelled flush emptied nothing; it is tried again (the server's transaction has ended by then).
"""

import functools

from django.core.management.base import CommandError
from django.db import connections
from django.test import TransactionTestCase


def _set_triggers(flushed_connections, role: str) -> None:
    for connection in flushed_connections:
        if connection.connection is not None or role == "replica":  # replica: connect if need be
            with connection.cursor() as cursor:
                cursor.execute(f"SET session_replication_role = {role}")


DEADLOCK_DETECTED = "40P01"  # PostgreSQL's SQLSTATE
FLUSH_ATTEMPTS = 5


def _cancelled_by_a_deadlock(error: BaseException) -> bool:
    cause: BaseException | None = error
    while cause is not None:
        if getattr(cause, "sqlstate", None) == DEADLOCK_DETECTED:
            return True
        cause = cause.__cause__
    return False


def flush_retrying_deadlocks(flush) -> None:
    for attempt in range(1, FLUSH_ATTEMPTS + 1):
        try:
            flush()
            return
        except CommandError as error:
            if attempt == FLUSH_ATTEMPTS or not _cancelled_by_a_deadlock(error):
                raise


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
            flush_retrying_deadlocks(lambda: original(self))
        finally:
            _set_triggers(postgres, "origin")

    fixture_teardown.flushes_through_audit_triggers = True
    TransactionTestCase._fixture_teardown = fixture_teardown
