"""Fixtures of the fault tests: a private PostgreSQL and Redis per module (tests/faults/servers.py), and
this test process's ORM pointed at a database of that PostgreSQL for the length of a test.

Why the swap: the fault tests crash and restart their PostgreSQL, so the data they check must live on
it, not on the shared test database pytest-django made. `default_database(url)` installs a connection
to the private database as Django's default (this thread only) and puts the original back afterwards;
the suite's own test database is never touched, on SQLite as on PostgreSQL.
"""

import itertools
import os
import shutil
import tempfile
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.utils import load_backend

from lib.env import database_settings
from reviewer.fixed_settings import redis_channel_layers
from tests.faults.servers import PrivatePostgres, PrivateRedis

_database_numbers = itertools.count(1)


@pytest.fixture(scope="module")
def fault_folder():
    """A folder the `postgres` account can enter too (pytest's tmp_path is private to the test user)."""
    folder = Path(tempfile.mkdtemp(prefix="reviewer-faults-"))
    os.chmod(folder, 0o755)  # noqa: S103 (read and enter only: the postgres account runs initdb in it)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def private_postgres(fault_folder):
    server = PrivatePostgres(fault_folder / "postgres").init().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def private_redis(fault_folder):
    server = PrivateRedis(fault_folder / "redis").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def layer_on_private_redis(private_redis, settings):
    """This test's channel layer on the module's private Redis, configured as deployed; returns the server
    (to restart it)."""
    settings.CHANNEL_LAYERS = redis_channel_layers(private_redis.url, prefix="faults")
    return private_redis


@contextmanager
def default_database(url: str):
    """Django's default connection, in this thread, goes to `url` (no pool: a test's few queries; several
    hosts as the settings read them: the failover test's primary and standby)."""
    settings_dict = connections.configure_settings(
        {DEFAULT_DB_ALIAS: database_settings(url, conn_max_age=0)}
    )[DEFAULT_DB_ALIAS]
    private = load_backend(settings_dict["ENGINE"]).DatabaseWrapper(settings_dict, DEFAULT_DB_ALIAS)
    original = connections[DEFAULT_DB_ALIAS]
    connections[DEFAULT_DB_ALIAS] = private
    try:
        yield private
    finally:
        private.close()
        connections[DEFAULT_DB_ALIAS] = original


@pytest.fixture
def on_private_database(private_postgres, django_db_blocker):
    """A fresh, migrated database on the private PostgreSQL, Django's default for this test; returns a
    function that names it again (after a restore into another database, say)."""
    from django.core.management import call_command

    stack: list[AbstractContextManager[object]] = []

    def use(url: str | None = None, *, migrate: bool = True) -> str:
        url = url or private_postgres.create_database(f"reviewer_{next(_database_numbers)}")
        if stack:
            stack.pop().__exit__(None, None, None)
        swap = default_database(url)
        swap.__enter__()
        stack.append(swap)
        if migrate:
            call_command("migrate", verbosity=0)
        return url

    with django_db_blocker.unblock():
        try:
            yield use
        finally:
            if stack:
                stack.pop().__exit__(None, None, None)
