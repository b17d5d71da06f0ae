"""The audit record every app's services write in their own transaction (labels: audit/labels.py)."""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from itertools import groupby

from audit.chain.accept import accept_many, append
from audit.labels import tenant_chain
from audit.shapes import format_time

# The events record() holds back inside recorded_together(), as (chain, event), in their order.
_held: ContextVar[list[tuple[str, dict]] | None] = ContextVar("audit_held", default=None)


def record(tenant_id: int | None, *, actor: str, verb: str, subject: str, data: dict | None = None):
    """Append an audit event to the tenant's chain (or the system chain) in the current transaction."""
    chain, held = tenant_chain(tenant_id), _held.get()
    if held is not None:
        held.append((chain, {"actor": actor, "verb": verb, "subject": subject, "data": data}))
        return None
    return append(chain, actor=actor, verb=verb, subject=subject, data=data)


@contextmanager
def recorded_together() -> Iterator[None]:
    """The events record() writes inside this block (in a transaction) are appended when it ends
    without an error, in their order, with one statement per run of one chain's events instead of one
    per event (held with the caller's other writes, if it holds them: lib/storage/held_writes.py). For a
    change that writes several events and reads none of them back (intake)."""
    if _held.get() is not None:  # an outer block appends them
        yield
        return
    held: list[tuple[str, dict]] = []
    token = _held.set(held)
    try:
        yield
    finally:
        _held.reset(token)
    for chain, run in groupby(held, key=lambda item: item[0]):
        accept_many(chain, [event for _, event in run])


def audit_time(value: datetime | None) -> str | None:
    return format_time(value) if value else None
