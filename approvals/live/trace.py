"""Stage timestamps of a proposal page's live update, for the R2 bench only (bench/r2_fanout.py).

Off unless the process was started with REVIEWER_LIVE_TRACE=<file> (the bench sets it for its Daphnes;
no deployment does): then each page socket appends one line per proposal.changed event it handled,
"<event id> <pid> <path> <received> <sent>" (time.time(), comparable between the processes of one
machine): when its handler started, and when its frame was handed to Daphne. One os.write per line on
a file opened for appending (a few microseconds), so the trace does not change what it measures.
"""

import os
import time

_PATH = os.environ.get("REVIEWER_LIVE_TRACE") or None
_fd: int | None = None


def enabled() -> bool:
    return _PATH is not None


def now() -> float:
    return time.time()


def handled(event: dict, path: str, received: float) -> None:
    """Record that this process's socket handled `event` by `path` ("message" or "read")."""
    global _fd
    if _PATH is None:
        return
    if _fd is None:
        _fd = os.open(_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    line = f"{event.get('event')} {os.getpid()} {path} {received:.6f} {time.time():.6f}\n"
    os.write(_fd, line.encode())
