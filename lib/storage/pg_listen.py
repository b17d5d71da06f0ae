"""LISTEN and NOTIFY on PostgreSQL channels: how the worker is woken for outbox messages
(approvals/wakeup.py) and its audit sequencer for pending events (audit/chain/wakeup.py). A listener
has a connection of its own, in autocommit; a notification goes on Django's connection, in the
sender's transaction.

A listener connects to `DATABASE_LISTEN_URL` when it is set, else as Django's connection does. Behind
PgBouncer in transaction mode it must be set to a direct connection: PgBouncer hands the server
connection that ran LISTEN back to its pool after that one statement, so notifications reach whichever
client uses it next, or nobody, and the listener never hears them (nothing fails: the worker falls back
to its poll). A NOTIFY goes through PgBouncer as any statement does."""

import psycopg
from django.conf import settings
from django.db import connection


def supported() -> bool:
    """Whether the database is PostgreSQL, where LISTEN/NOTIFY reach other processes."""
    return connection.vendor == "postgresql"


def notify(channel: str) -> None:
    """NOTIFY `channel` on Django's connection: PostgreSQL delivers it when (and if) the current
    transaction commits, at once outside one; several of one transaction reach a listener once."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, '')", [channel])


class PostgresListener:
    def __init__(self, channel: str):
        if settings.DATABASE_LISTEN_URL:
            self.connection = psycopg.connect(settings.DATABASE_LISTEN_URL, autocommit=True)
        else:
            self.connection = psycopg.connect(**connection.get_connection_params(), autocommit=True)
        self.connection.execute(f"LISTEN {channel}")

    def wait(self, timeout: float, *, gather: float = 0) -> bool:
        """True as soon as a wake-up came, or `gather` seconds after it (the wake-ups that came meanwhile
        are taken too: one pass serves them all), False after `timeout` seconds."""
        woken = False
        for _ in self.connection.notifies(timeout=timeout, stop_after=1):
            woken = True
        if woken:
            for _ in self.connection.notifies(timeout=gather):
                pass
        return woken

    def close(self) -> None:
        self.connection.close()
