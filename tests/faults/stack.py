"""Reviewer under Daphne, its worker and the demo refund agent on a private PostgreSQL and Redis, with
each process killable (SIGKILL) and startable again on its own: the e2e stack's pieces
(tests/reviewer_processes.py; tests/examples/harness.py `AgentProcess`), arranged for faults.

Daphne gets the listening socket by --fd, as in the e2e stack; the socket stays open in this process
while Daphne is dead, so a client's connection waits in the backlog for the next Daphne instead of being
refused (what a socket-activated or proxied deployment sees). Each start is a new log file, so waiting
for "worker started" never matches an earlier process's line.
"""

import itertools
import os
import signal
from pathlib import Path

import signing_keys as keys
from tests.examples.harness import AgentProcess
from tests.reviewer_processes import ServerProcess, daphne, listening_socket, reviewer_env, url_of, worker

# An execution with no outcome is asked about (GetTask) after this long, instead of 300 s: the outcome
# report is what a Daphne or PostgreSQL crash loses, and reconciliation is what recovers it.
EXECUTING_RECONCILE_SECONDS = 3


class FaultStack:
    push_token = "fault-push-token"
    api_token = "agent-api-token"  # what tests/examples/harness.py's AgentProcess sends

    def __init__(self, folder: Path, *, database_url: str, redis_url: str, downstream_url: str):
        self.folder = folder
        self.database_url, self.redis_url, self.downstream_url = database_url, redis_url, downstream_url
        self.log_dir = folder / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.checkpoint_dir = folder / "checkpoints"
        self.listener = listening_socket(backlog=128)
        self.url = url_of(self.listener)
        self.reviewer: ServerProcess | None = None
        self.worker: ServerProcess | None = None
        # Made now so its card URL (the registration's audience) is known before anything starts.
        self.agent = AgentProcess(
            state_dir=folder / "refund-agent", reviewer_url=self.url, downstream_url=downstream_url
        )
        self.ended: list[ServerProcess] = []  # killed processes, for their logs
        self._starts = itertools.count(1)

    @property
    def webhook(self) -> str:
        return f"{self.url}/a2a/push/refund-demo/"

    def env(self) -> dict:
        return reviewer_env(
            url=self.url,
            database_url=self.database_url,
            data_dir=self.folder / "data",
            REDIS_URL=self.redis_url,
            AUDIT_CHECKPOINT_DIR=str(self.checkpoint_dir),
            EXECUTING_RECONCILE_SECONDS=str(EXECUTING_RECONCILE_SECONDS),
        )

    # --- starting -------------------------------------------------------------------------------

    def start(self) -> "FaultStack":
        """Daphne, the worker and the agent started side by side, then waited for each."""
        keys.active_key()  # made once, here, before two processes could each make their own
        self.reviewer, self.worker = self._reviewer().start(), self._worker().start()
        self.agent.launch()
        self.reviewer.wait_ready()
        self.worker.wait_ready()
        self.agent.wait_ready()
        return self

    def start_reviewer(self) -> None:
        self.reviewer = self._reviewer().start().wait_ready()

    def start_worker(self) -> None:
        self.worker = self._worker().start().wait_ready()

    def _reviewer(self) -> ServerProcess:
        return daphne(f"reviewer-{next(self._starts)}", self.listener, env=self.env(), log_dir=self.log_dir)

    def _worker(self) -> ServerProcess:
        return worker(f"worker-{next(self._starts)}", env=self.env(), log_dir=self.log_dir, interval="0.5")

    # --- killing --------------------------------------------------------------------------------

    def kill(self, process: ServerProcess) -> None:
        """SIGKILL, by PID: no handler runs, nothing is flushed, nothing is handed over."""
        assert process.process is not None, f"{process.name} was never started"
        os.kill(process.process.pid, signal.SIGKILL)
        process.process.wait(timeout=10)
        self.ended.append(process)

    def kill_reviewer(self) -> None:
        assert self.reviewer is not None, "no Reviewer running"
        self.kill(self.reviewer)
        self.reviewer = None

    def kill_worker(self) -> None:
        assert self.worker is not None, "no worker running"
        self.kill(self.worker)
        self.worker = None

    def stop(self) -> None:
        self.agent.stop()
        for process in (self.worker, self.reviewer):
            if process is not None:
                process.stop()
        self.listener.close()

    def logs(self) -> str:
        processes = [*self.ended, *(p for p in (self.reviewer, self.worker) if p is not None)]
        parts = [f"--- {p.name}\n{p.log()[-3000:]}" for p in processes]
        parts.append(f"--- refund agent\n{self.agent.log()[-5000:]}")
        return "\n".join(parts)
