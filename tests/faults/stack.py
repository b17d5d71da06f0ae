"""Reviewer under Daphne, its worker and the demo refund agent on a private PostgreSQL and Redis, with
each process killable (SIGKILL) and startable again on its own: the e2e stack's pieces
(tests/e2e/conftest.py `ServerProcess`, `database_url`; tests/examples/harness.py `AgentProcess`),
arranged for faults.

Daphne gets the listening socket by --fd, as in the e2e stack; the socket stays open in this process
while Daphne is dead, so a client's connection waits in the backlog for the next Daphne instead of being
refused (what a socket-activated or proxied deployment sees). Each start is a new log file, so waiting
for "worker started" never matches an earlier process's line.
"""

import itertools
import os
import signal
import socket
import sys
from pathlib import Path

import httpx
from django.conf import settings as django_settings

import signing_keys as keys
from tests.e2e.conftest import ServerProcess
from tests.examples.harness import CHECKOUT_PYTHONPATH, AgentProcess

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
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
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
        env = {
            **os.environ,
            "PYTHONPATH": CHECKOUT_PYTHONPATH,
            "PYTHONUNBUFFERED": "1",
            "DEBUG": "true",
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.redis_url,
            "REVIEWER_ISSUER": self.url,
            "REVIEWER_DATA_DIR": str(self.folder / "data"),
            "REVIEWER_SIGNING_KEY_DIR": str(django_settings.SIGNING_KEY_DIR),
            "AUDIT_CHECKPOINT_DIR": str(self.checkpoint_dir),
            "EXECUTING_RECONCILE_SECONDS": str(EXECUTING_RECONCILE_SECONDS),
            "LOG_LEVEL": "INFO",
            "AGENT_ALLOWED_NETWORKS": "127.0.0.0/8,::1/128",
        }
        for name in ("REVIEWER_SIGNING_KEY", "REVIEWER_SIGNING_KEY_FILE", "SECRET_KEY", "SECRET_KEY_FILE"):
            env.pop(name, None)
        return env

    # --- starting -------------------------------------------------------------------------------

    def start(self) -> "FaultStack":
        keys.active_key()  # made once, here, before two processes could each make their own
        self.start_reviewer()
        self.start_worker()
        self.agent.start()
        return self

    def start_reviewer(self) -> None:
        fd = self.listener.fileno()
        self.reviewer = ServerProcess(
            f"reviewer-{next(self._starts)}",
            [sys.executable, "-m", "daphne", "--fd", str(fd), "reviewer.asgi:application"],
            env=self.env(),
            log_dir=self.log_dir,
            pass_fds=(fd,),
        ).start()
        self.reviewer.wait_until(self._jwks_answers, "an answer to /.well-known/jwks.json")

    def _jwks_answers(self) -> bool:
        try:
            return httpx.get(f"{self.url}/.well-known/jwks.json", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def start_worker(self) -> None:
        self.worker = ServerProcess(
            f"worker-{next(self._starts)}",
            [sys.executable, "manage.py", "run_worker", "--interval", "0.5"],
            env=self.env(),
            log_dir=self.log_dir,
        ).start()
        worker = self.worker
        worker.wait_until(lambda: "worker started" in worker.log(), "'worker started'")

    # --- killing --------------------------------------------------------------------------------

    def kill(self, process: ServerProcess) -> None:
        """SIGKILL, by PID: no handler runs, nothing is flushed, nothing is handed over."""
        os.kill(process.process.pid, signal.SIGKILL)
        process.process.wait(timeout=10)
        self.ended.append(process)

    def kill_reviewer(self) -> None:
        self.kill(self.reviewer)
        self.reviewer = None

    def kill_worker(self) -> None:
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
