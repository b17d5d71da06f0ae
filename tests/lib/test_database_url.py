"""DATABASE_URL in Django's form (lib/env.py `database_settings`): one host as dj-database-url reads it,
and PostgreSQL's multi-host form, whose hosts and ports libpq tries in turn (the failover's URL)."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from lib.env import database_settings


def test_several_hosts_reach_libpq_as_its_lists_with_the_session_attributes():
    settings = database_settings(
        "postgres://app:secret@db-a:5433,db-b/reviewer?target_session_attrs=read-write", conn_max_age=0
    )

    assert (settings["HOST"], settings["PORT"]) == ("db-a,db-b", "5433,5432")
    assert (settings["USER"], settings["PASSWORD"], settings["NAME"]) == ("app", "secret", "reviewer")
    assert settings["OPTIONS"] == {"target_session_attrs": "read-write"}
    assert settings["ENGINE"] == "django.db.backends.postgresql"


def test_one_host_is_read_as_dj_database_url_reads_it():
    assert database_settings("postgres://app@db:6432/reviewer")["HOST"] == "db"
    assert database_settings("sqlite:////tmp/reviewer.sqlite3")["ENGINE"] == "django.db.backends.sqlite3"


def test_an_empty_host_in_the_list_stops_start_up():
    with pytest.raises(ImproperlyConfigured):
        database_settings("postgres://app@db-a,:5432/reviewer")
