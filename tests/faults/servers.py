"""Private PostgreSQL and Redis servers for the fault tests: started from the installed binaries in a
temporary folder, on loopback ports picked free, restarted at will, stopped by their PID.

Never the machine's shared servers: the rest of the suite (and whatever else runs here) uses those, and these
tests stop and crash theirs on purpose. PostgreSQL refuses to run as root; when the tests do, the server
runs as the `postgres` account (setpriv, which execs, so the PID is the postmaster's).
"""

import glob
import os
import shutil
import signal
import subprocess
from pathlib import Path

import psycopg
import redis

from tests.examples.harness import free_port
from tests.waiting import wait_until

READY_SECONDS = 30


def postgres_bin(name: str) -> str:
    """A PostgreSQL server binary (initdb, postgres, pg_dump...): the newest installed version's."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=_version_of)
    if found:
        return found[-1]
    on_path = shutil.which(name)
    if on_path is None:
        raise RuntimeError(f"{name} not found (install the PostgreSQL server package)")
    return on_path


def _version_of(path: str) -> int:
    try:
        return int(Path(path).parents[1].name)
    except ValueError:
        return 0


def _as_postgres_account() -> list[str]:
    """The command prefix that runs PostgreSQL's binaries: as the `postgres` account when we are root."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"]


class PrivatePostgres:
    """One PostgreSQL cluster of our own (initdb), superuser `postgres`, trust on loopback only.

    `restart()` is a crash, not a clean stop: SIGQUIT is PostgreSQL's immediate shutdown (what
    `pg_ctl stop -m immediate` sends), so every connection drops at once and the next start runs crash
    recovery. fsync is off: this cluster lives for one test, durability across a power cut is not tested.
    """

    def __init__(self, folder: Path):
        self.folder = folder
        self.data = folder / "pgdata"
        self.socket_dir = folder / "pgsocket"
        self.log_path = folder / "postgres.log"
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    def url(self, database: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def init(self) -> "PrivatePostgres":
        self.folder.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
            shutil.chown(self.socket_dir, "postgres", "postgres")
        done = subprocess.run(
            [
                *_as_postgres_account(),
                postgres_bin("initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        return self

    def start(self) -> "PrivatePostgres":
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                *_as_postgres_account(),
                postgres_bin("postgres"),
                "-D",
                str(self.data),
                "-p",
                str(self.port),
                "-k",
                str(self.socket_dir),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "max_connections=200",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        wait_until(
            self._accepts,
            "the private PostgreSQL to accept connections",
            timeout=READY_SECONDS,
            interval=0.1,
            detail=self.log,
        )
        return self

    def _accepts(self) -> bool:
        assert self.process is not None, "start() first"
        if self.process.poll() is not None:
            raise RuntimeError(f"postgres exited with {self.process.returncode}:\n{self.log()}")
        try:
            with psycopg.connect(self.url(), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def crash(self) -> None:
        """Immediate shutdown: every backend is gone, nothing is checkpointed."""
        self._signal_and_wait(signal.SIGQUIT)

    def restart(self) -> None:
        self.crash()
        self.start()

    def stop(self) -> None:
        self._signal_and_wait(signal.SIGINT)  # fast shutdown

    def _signal_and_wait(self, sig: int) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def streaming_standby(self, folder: Path, name: str = "standby") -> "PrivatePostgres":
        """A hot standby of this server (pg_basebackup -R: a base backup that streams the WAL from here),
        not started; `name` is what it tells this primary (its application_name), which
        `require_synchronous_standby` names."""
        standby = PrivatePostgres(folder)
        folder.mkdir(parents=True, exist_ok=True)
        standby.socket_dir.mkdir(exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(folder, "postgres", "postgres")
            shutil.chown(standby.socket_dir, "postgres", "postgres")
        conninfo = f"host=127.0.0.1 port={self.port} user=postgres application_name={name}"
        done = subprocess.run(
            [
                *_as_postgres_account(),
                postgres_bin("pg_basebackup"),
                "--dbname",
                conninfo,
                "-D",
                str(standby.data),
                "-X",
                "stream",
                "-R",
                "--no-sync",
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"pg_basebackup failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        return standby

    def require_synchronous_standby(self, name: str = "standby") -> None:
        """A commit returns only once `name` has it on disk (synchronous_commit = on, the default), and
        wait until that standby streams synchronously."""
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{name}'")
            connection.execute("SELECT pg_reload_conf()")

        def synchronous() -> bool:
            with psycopg.connect(self.url()) as connection:
                row = connection.execute(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s", [name]
                ).fetchone()
            return row is not None and row[0] == "sync"

        wait_until(synchronous, f"{name} to stream synchronously", timeout=READY_SECONDS, detail=self.log)

    def promote(self) -> None:
        """Make this standby a primary (pg_promote waits until it is)."""
        with psycopg.connect(self.url(), autocommit=True) as connection:
            promoted = connection.execute("SELECT pg_promote(true, 60)").fetchone()
        if not promoted or not promoted[0]:
            raise RuntimeError(f"the standby was not promoted:\n{self.log()}")

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:] if self.log_path.exists() else ""


class PrivateRedis:
    """One redis-server of our own, no persistence; `restart()` kills it (SIGKILL) and starts it again
    on the same port, empty, as a crashed Redis comes back."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.log_path = folder / "redis.log"
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "PrivateRedis":
        self.folder.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                shutil.which("redis-server") or "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.folder),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        wait_until(
            self._answers,
            "the private Redis to answer PING",
            timeout=READY_SECONDS,
            interval=0.1,
            detail=self.log,
        )
        return self

    def _answers(self) -> bool:
        assert self.process is not None, "start() first"
        if self.process.poll() is not None:
            raise RuntimeError(f"redis-server exited with {self.process.returncode}:\n{self.log()}")
        try:
            return redis.Redis(port=self.port, socket_connect_timeout=1).ping()
        except redis.RedisError:
            return False

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""
