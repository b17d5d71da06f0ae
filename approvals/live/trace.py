"""Stage timestamps of a proposal page's live update, for the R2 bench only (bench/r2_fanout.py).

Off unless the process was started with REVIEWER_LIVE_TRACE=<file> (the bench sets it for its Daphnes;
no deployment does): then each page socket appends one line per proposal.changed event it handled,
"<event id> <pid> <path> <received> <sent>" (time.time(), comparable between the processes of one
machine): when its handler started, and when its frame was handed to Daphne. A handler only notes its
two times; the lines are written with one os.write on the event loop's next turn, after the process's
sockets of the message have all been handed their frames. A write per line (a profile of R2's Daphne
put 14% of the sockets' handling in it) would have delayed every frame of the message: they reach the
network only when the loop next turns.
"""

import asyncio
import os
import time

_PATH = os.environ.get("REVIEWER_LIVE_TRACE") or None
_fd: int | None = None
_pending: list[tuple] = []  # (event id, path, received, sent), written at the loop's next turn


def enabled() -> bool:
    return _PATH is not None


def now() -> float:
    return time.time()


def handled(event: dict, path: str, received: float) -> None:
    """Record that this process's socket handled `event` by `path` ("message" or "read")."""
    if _PATH is None:
        return
    if not _pending:
        asyncio.get_running_loop().call_soon(_write_pending)
    _pending.append((event.get("event"), path, received, time.time()))


def _write_pending() -> None:
    global _fd
    assert _PATH is not None  # scheduled only by handled(), which returns when tracing is off
    if _fd is None:
        _fd = os.open(_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    pid = os.getpid()
    lines = "".join(f"{event} {pid} {path} {got:.6f} {sent:.6f}\n" for event, path, got, sent in _pending)
    _pending.clear()
    os.write(_fd, lines.encode())
