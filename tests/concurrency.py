"""Running calls at the same moment on separate database connections (real row locks: PostgreSQL)."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.conf import settings
from django.db import connection

requires_postgres = pytest.mark.skipif(not settings.IS_POSTGRES, reason="needs PostgreSQL (DATABASE_URL)")


def run_together(*calls):
    """Run each call in its own thread and connection, released together by a barrier. Returns what each
    returned or raised, in order."""
    barrier = threading.Barrier(len(calls))

    def run(call):
        try:
            barrier.wait(timeout=10)
            return call()
        except Exception as error:  # noqa: BLE001 - the test inspects what each call got
            return error
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return [future.result(timeout=60) for future in [pool.submit(run, call) for call in calls]]
