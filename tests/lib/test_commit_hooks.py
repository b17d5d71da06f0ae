"""lib/commit_hooks.py on Django's documented on_commit alone: what a rolled-back savepoint or
transaction registered never runs and never suppresses a later registration, one hook runs per key and
commit, and on_commit_first runs before the hooks registered earlier (latest first). Real commits, so
these run in transactional tests."""

import contextlib

import pytest
from django.db import transaction

from lib.commit_hooks import on_commit, on_commit_first, on_commit_once

pytestmark = pytest.mark.django_db(transaction=True)


def recorder(ran, name):
    return lambda: ran.append(name)


def test_a_rolled_back_savepoint_drops_only_its_own_registrations():
    ran: list[str] = []
    with transaction.atomic():
        on_commit_once("kept", recorder(ran, "kept"))
        with contextlib.suppress(RuntimeError), transaction.atomic():
            on_commit_once("kept", recorder(ran, "kept, again"))  # the outer one will run: nothing added
            on_commit_once("dropped", recorder(ran, "dropped"))
            on_commit_first(recorder(ran, "dropped first"))
            on_commit(recorder(ran, "dropped plain"))
            raise RuntimeError("roll this savepoint back")
        on_commit(recorder(ran, "after the savepoint"))
    assert ran == ["kept", "after the savepoint"]


def test_a_key_registered_only_in_a_rolled_back_savepoint_runs_from_a_later_call():
    ran: list[str] = []
    with transaction.atomic():
        with contextlib.suppress(RuntimeError), transaction.atomic():
            on_commit_once("key", recorder(ran, "inside"))
            raise RuntimeError("roll this savepoint back")
        on_commit_once("key", recorder(ran, "outside"))
    assert ran == ["outside"]


def test_a_released_savepoint_keeps_its_registration_for_the_key():
    ran: list[str] = []
    with transaction.atomic():
        with transaction.atomic():
            on_commit_once("key", recorder(ran, "inside"))
        on_commit_once("key", recorder(ran, "outside"))
    assert ran == ["inside"]


def test_a_rolled_back_transaction_does_not_suppress_the_next_ones_hook():
    ran: list[str] = []
    with pytest.raises(RuntimeError), transaction.atomic():
        on_commit_once("key", recorder(ran, "rolled back"))
        on_commit_first(recorder(ran, "rolled back first"))
        raise RuntimeError("roll the transaction back")
    with transaction.atomic():
        on_commit_once("key", recorder(ran, "committed"))
    assert ran == ["committed"]


def test_one_hook_per_key_per_commit():
    ran: list[str] = []
    with transaction.atomic():
        for n in range(3):
            on_commit_once("key", recorder(ran, f"key {n}"))
        on_commit_once("other key", recorder(ran, "other key"))
    assert ran == ["key 0", "other key"]
    with transaction.atomic():  # the next commit runs it again
        on_commit_once("key", recorder(ran, "next commit"))
    assert ran == ["key 0", "other key", "next commit"]


def test_on_commit_first_runs_before_the_hooks_registered_earlier_latest_first():
    ran: list[str] = []
    with transaction.atomic():
        on_commit(recorder(ran, "plain"))
        on_commit_once("key", recorder(ran, "once"))
        on_commit_first(recorder(ran, "first"))
        on_commit_first(recorder(ran, "first, registered last"))
        on_commit(recorder(ran, "plain, registered after them"))
    assert ran == ["first, registered last", "first", "plain", "once", "plain, registered after them"]


def test_a_failing_first_hook_is_logged_and_the_commits_other_hooks_still_run(caplog):
    ran: list[str] = []

    def fails():
        raise ValueError("broken hook")

    with transaction.atomic():
        on_commit(recorder(ran, "plain"))
        on_commit_first(fails)
    assert ran == ["plain"]
    assert "broken hook" in caplog.text


def test_outside_a_transaction_each_hook_runs_at_once():
    ran: list[str] = []
    on_commit_once("key", recorder(ran, "once"))
    on_commit_once("key", recorder(ran, "once, again"))
    on_commit_first(recorder(ran, "first"))
    on_commit(recorder(ran, "plain"))
    assert ran == ["once", "once, again", "first", "plain"]
