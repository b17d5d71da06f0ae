"""The after-commit thread (lib/commit_hooks.py `on_commit_in_background`): the audit sequencer and the
sockets' broadcasts run after commit on one background thread of the process, so the committing request
answers without waiting for them. A rolled-back change hands nothing over; one queued run per key
covers every commit before it; a failing hook is logged and the thread goes on."""

import asyncio
import threading

import pytest
from django.db import transaction

from audit.models import AuditEvent
from audit.trail import record
from lib.commit_hooks import on_commit_in_background, run_async, wait_for_background_hooks

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _in_background(settings):
    settings.COMMIT_HOOKS_IN_BACKGROUND = True
    yield
    wait_for_background_hooks()


def test_committed_events_are_chained_by_the_after_commit_thread_not_the_committing_one(tenant):
    with transaction.atomic():
        record(tenant.id, actor="test", verb="proposal.submitted", subject="proposal:1")
        record(tenant.id, actor="test", verb="proposal.submitted", subject="proposal:2")
    wait_for_background_hooks()
    events = AuditEvent.objects.chained(f"tenant:{tenant.id}")
    assert events.count() == 2
    assert sorted(events.values_list("seq", flat=True)) == [1, 2]


def test_a_hook_runs_on_the_after_commit_thread_once_the_transaction_commits():
    ran_on = []
    with transaction.atomic():
        on_commit_in_background(lambda: ran_on.append(threading.current_thread().name))
        assert ran_on == []
    wait_for_background_hooks()
    assert len(ran_on) == 1
    assert ran_on[0].startswith("after-commit")
    assert ran_on[0] != threading.current_thread().name


def test_a_rolled_back_transaction_hands_nothing_over():
    ran = []
    with pytest.raises(RuntimeError), transaction.atomic():
        on_commit_in_background(lambda: ran.append(1))
        raise RuntimeError("rolled back")
    wait_for_background_hooks()
    assert ran == []


def test_one_queued_run_per_key_covers_the_commits_before_it():
    release = threading.Event()
    runs = []
    on_commit_in_background(release.wait)  # holds the thread, so the next hooks stay queued
    for _ in range(3):
        with transaction.atomic():
            on_commit_in_background(lambda: runs.append("sequence"), key=("test", "chain"))
    release.set()
    wait_for_background_hooks()
    assert runs == ["sequence"]
    with transaction.atomic():  # once that run started, a new commit queues the next one
        on_commit_in_background(lambda: runs.append("sequence"), key=("test", "chain"))
    wait_for_background_hooks()
    assert runs == ["sequence", "sequence"]


def test_a_failing_hook_is_logged_and_the_next_one_still_runs(caplog):
    ran = []

    def fails():
        raise ValueError("broken hook")

    on_commit_in_background(fails)
    on_commit_in_background(lambda: ran.append(1))
    wait_for_background_hooks()
    assert ran == [1]
    assert "after-commit hook" in caplog.text


def test_the_after_commit_threads_coroutines_share_one_event_loop_kept_between_hooks():
    """The broadcasts' channel layer keeps its Redis connection per event loop: one loop for the
    thread's life is one connection, not one per change (lib/commit_hooks.py run_async)."""
    loops = []

    async def note_the_loop():
        loops.append(asyncio.get_running_loop())

    for _ in range(2):
        with transaction.atomic():
            on_commit_in_background(lambda: run_async(note_the_loop))
        wait_for_background_hooks()
    assert len(loops) == 2
    assert loops[0] is loops[1] and not loops[0].is_closed()
