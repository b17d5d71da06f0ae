"""Signed checkpoints, also written outside the database: one append-only JSON Lines file per chain in
AUDIT_CHECKPOINT_DIR (`tenant-3.jsonl`, `system.jsonl`), one checkpoint per line, the same fields as a
bundle's checkpoints.jsonl ({chain, seq, hash, at, kid, signature}).

Whoever owns the database can delete events together with their in-database checkpoints, or rewrite an
event and recompute every hash after it; these files are what such a change contradicts
(`manage.py audit_verify` reads them). They are worth most when an operator ships them elsewhere (log
shipping, a WORM bucket, `rsync` to another host): several processes may append to the same file, lines
are written whole (O_APPEND) and need not be in seq order.
"""

import json
import logging
import os
from pathlib import Path

from django.conf import settings

log = logging.getLogger(__name__)


def file_name(chain: str) -> str:
    return chain.replace(":", "-") + ".jsonl"


def write(checkpoint) -> None:
    """Append one committed checkpoint to its chain's file. A failure is logged, never raised: the
    checkpoint is in the database already, and the next one is written as usual."""
    from audit.chain.records import checkpoint_dict

    directory = Path(settings.AUDIT_CHECKPOINT_DIR)
    line = (json.dumps(checkpoint_dict(checkpoint), sort_keys=True) + "\n").encode()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(
            directory / file_name(checkpoint.chain), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640
        )
        try:
            os.write(descriptor, line)  # one write per line: appends of several processes never mix
        finally:
            os.close(descriptor)
    except OSError:
        log.exception(
            "could not write the checkpoint of %s at %s to %s", checkpoint.chain, checkpoint.seq, directory
        )


def chains(source: Path | None = None) -> list[str]:
    """The chains that have a checkpoint file in `source` (default AUDIT_CHECKPOINT_DIR): a chain whose
    every row was deleted from the database is still checked against its file."""
    source = Path(source if source is not None else settings.AUDIT_CHECKPOINT_DIR)
    paths = sorted(source.glob("*.jsonl")) if source.is_dir() else [source] if source.exists() else []
    found = set()
    for path in paths:
        with path.open("rb") as lines:
            for line in lines:
                try:
                    found.add(json.loads(line)["chain"])
                except (ValueError, KeyError, TypeError):
                    continue
    return sorted(found)


def read(chain: str, source: Path | None = None) -> list[dict]:
    """The checkpoints of `chain` found in `source` (a directory of chain files, or one file; default
    AUDIT_CHECKPOINT_DIR), in seq order. A line that is not a checkpoint of this chain is skipped."""
    source = Path(source if source is not None else settings.AUDIT_CHECKPOINT_DIR)
    path = source / file_name(chain) if source.is_dir() or not source.exists() else source
    if not path.exists():
        return []
    checkpoints = []
    with path.open("rb") as lines:
        for line in lines:
            try:
                checkpoint = json.loads(line)
            except ValueError:
                continue  # a torn last line (the disk filled up): the other lines still count
            if isinstance(checkpoint, dict) and checkpoint.get("chain") == chain:
                checkpoints.append(checkpoint)
    return sorted(checkpoints, key=lambda checkpoint: checkpoint["seq"])
