"""The worker's jobs (approvals/worker/jobs.py): each on a thread of its own, so a job that keeps failing
runs again at its interval and a job that hangs delays no other; and the operators' table in
docs/operations.md lists exactly the jobs the worker runs."""

import re
import threading
from pathlib import Path

from approvals.worker.jobs import JOBS, Job, JobContext
from approvals.worker.loop import JobThread

DEADLINE = 30  # seconds a wait may take before the test fails (never a pass condition)
OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def test_the_operators_table_lists_every_job_the_worker_runs_and_no_other():
    text = OPERATIONS.read_text()
    section = text[text.index("## The worker: one job, one function") :]
    section = section[: section.index("\n## ", 1)]
    documented = re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.MULTILINE)
    assert documented == [job.name for job in JOBS]


def test_every_job_has_its_own_name():
    names = [job.name for job in JOBS]
    assert len(names) == len(set(names))


def test_a_failing_job_and_a_hanging_job_delay_no_other_job():
    stop, release = threading.Event(), threading.Event()
    context = JobContext(stop=stop)
    failures, runs = [], []
    failed_twice, ran_thrice, hanging = threading.Event(), threading.Event(), threading.Event()

    def failing(context, report, now):
        failures.append(1)
        if len(failures) == 2:
            failed_twice.set()
        raise RuntimeError("a job that always fails")

    def hangs(context, report, now):
        hanging.set()
        release.wait(DEADLINE)  # a call to a service that accepts and never answers

    def counting(context, report, now):
        runs.append(1)
        if len(runs) == 3:
            ran_thrice.set()

    threads = [
        JobThread(Job("failing", failing), context, interval=0.01),
        JobThread(Job("hangs", hangs), context, interval=0.01),
        JobThread(Job("counting", counting), context, interval=0.01),
    ]
    for thread in threads:
        thread.start()
    try:
        assert hanging.wait(DEADLINE) and failed_twice.wait(DEADLINE) and ran_thrice.wait(DEADLINE)
        assert not release.is_set()  # all of it while the hanging job still hangs
    finally:
        stop.set()
        release.set()
        for thread in threads:
            thread.join(DEADLINE)
