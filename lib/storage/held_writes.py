"""Writes nobody reads back, sent to the database together: one round trip for several statements.

Inside `held_writes()` (in a transaction), `write(sql, params)` keeps its statement instead of running
it. The kept statements run, in their order, in one `execute` when the block ends, or earlier, just
before any other statement of this connection (an ORM query, a raw cursor: Django's
`connection.execute_wrapper` hook), so that whatever runs next sees them: a read inside the block never
misses a held write, and the order of writes is the order of the calls. Outside the block `write()`
runs its statement at once.

On PostgreSQL the statements go as one text (Django's psycopg backend binds parameters client-side, so
one execute may hold several statements; they run in order, in the caller's transaction, and the first
error stops the rest and surfaces as that statement's error). Elsewhere they run one by one. A block
left by an exception drops what it held: the transaction is rolling back anyway. The transaction's
COMMIT stays Django's: the block ends before its `transaction.atomic()` does.

For a change that writes several rows and reads none of them (intake: the quota spend, the proposal
with its pins, the follow-up row, the audit events). It sends statements the apps' storage modules
built and builds none; it is lib's storage because approvals and audit both hold their writes with it.
"""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from django.db import connection, transaction

_held: ContextVar[list[tuple[str, Sequence]] | None] = ContextVar("held_writes", default=None)


def write(sql: str, params: Sequence = ()) -> None:
    """Run one data-modifying statement whose result nobody reads, or keep it for the block's round trip."""
    held = _held.get()
    if held is None:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
        return
    held.append((sql, params))


@contextmanager
def held_writes() -> Iterator[None]:
    """Hold this block's `write()`s for one round trip (see above); nested blocks leave it to the outer."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("held_writes() must run inside the transaction its writes belong to")
    if _held.get() is not None:  # an outer block sends them
        yield
        return
    held: list[tuple[str, Sequence]] = []
    token = _held.set(held)

    def send_held_first(execute, sql, params, many, context):
        if held:
            _send(held, context["cursor"])
        return execute(sql, params, many, context)

    try:
        with connection.execute_wrapper(send_held_first):
            yield
            if held:
                with connection.cursor() as cursor:
                    _send(held, cursor)
    finally:
        _held.reset(token)


def _send(held: list[tuple[str, Sequence]], cursor) -> None:
    statements = held[:]
    held.clear()  # first: the execute below passes through send_held_first again
    if connection.vendor == "postgresql":
        text = ";\n".join(sql for sql, _ in statements)
        cursor.execute(text, [value for _, params in statements for value in params])
        return
    for sql, params in statements:
        cursor.execute(sql, params)
