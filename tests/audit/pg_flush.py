"""Let Django's test flush through the append-only trigger on PostgreSQL.

Transactional tests (django_db(transaction=True), transactional_db, live_server) end with Django's
flush: one TRUNCATE of every table, which the audit trigger refuses, as it must for the application.
This fixture switches triggers off (`session_replication_role = replica`, superuser only) on the
connection that is about to flush, after the test body and before the flush; Django closes that
connection right after flushing, so the next test starts with the triggers on again.

Registered for every test by `from tests.audit.pg_flush import audit_triggers_allow_test_flush` in
tests/conftest.py (tests/audit/conftest.py imports it for this folder).
"""

import pytest
from django.db import connections

TRANSACTIONAL_FIXTURES = {
    "transactional_db",
    "live_server",
    "django_db_reset_sequences",
    "django_db_serialized_rollback",
}


def _is_transactional(request) -> bool:
    marker = request.node.get_closest_marker("django_db")
    if marker and (marker.kwargs.get("transaction") or marker.kwargs.get("reset_sequences")):
        return True
    return bool(TRANSACTIONAL_FIXTURES & set(request.fixturenames))


@pytest.fixture(autouse=True)
def audit_triggers_allow_test_flush(request):
    if not _is_transactional(request):
        yield
        return
    # Depending on the database helper makes pytest tear this fixture down before the flush.
    request.getfixturevalue("_django_db_helper")
    yield
    for connection in connections.all():
        if connection.vendor == "postgresql":
            # cursor() connects if the test never did: the flush runs on this very connection.
            with connection.cursor() as cursor:
                cursor.execute("SET session_replication_role = replica")
