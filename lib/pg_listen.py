"""LISTEN on a PostgreSQL channel from a connection of its own, in autocommit: how the worker is woken
for outbox messages (approvals/wakeup.py) and its audit sequencer for pending events
(audit/chain/wakeup.py)."""

import psycopg
from django.db import connection


class PostgresListener:
    def __init__(self, channel: str):
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
