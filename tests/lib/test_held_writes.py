"""lib/held_writes.py: writes held inside the block reach the database in their order, before any other
statement of the connection (so a read in between sees them), in one round trip on PostgreSQL, and
not at all when the block fails."""

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from lib.held_writes import held_writes, write

pytestmark = pytest.mark.django_db


@pytest.fixture
def numbers():
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE held_numbers (n integer PRIMARY KEY)")
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE held_numbers")


def stored() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT n FROM held_numbers ORDER BY n")
        return [row[0] for row in cursor.fetchall()]


def insert(n: int) -> None:
    write("INSERT INTO held_numbers (n) VALUES (%s)", [n])


def test_held_writes_are_sent_before_the_next_statement_and_when_the_block_ends(numbers):
    with CaptureQueriesContext(connection) as captured, transaction.atomic(), held_writes():
        insert(1)
        insert(2)
        assert len(captured) == 1  # the savepoint only: the inserts wait
        assert stored() == [1, 2]  # a read in the block sees them: they went just before it
        insert(3)
        write("UPDATE held_numbers SET n = n + 10 WHERE n = %s", [3])
    assert stored() == [1, 2, 13]  # in the order of the calls
    writes = [q["sql"] for q in captured if "held_numbers" in q["sql"] and not q["sql"].startswith("SELECT")]
    # One execute per run of writes on PostgreSQL; one per write elsewhere.
    assert len(writes) == (2 if connection.vendor == "postgresql" else 4)


def test_a_write_that_fails_fails_the_block_and_nothing_of_it_stays(numbers):
    insert(5)  # outside a block: at once
    with pytest.raises(IntegrityError), transaction.atomic(), held_writes():
        insert(6)
        insert(5)  # the primary key again
        insert(7)
    assert stored() == [5]


def test_a_block_left_by_an_error_sends_nothing(numbers):
    with pytest.raises(ValueError, match="refused"), transaction.atomic(), held_writes():
        insert(8)
        raise ValueError("refused")
    assert stored() == []


@pytest.mark.django_db(transaction=True)
def test_holding_writes_outside_a_transaction_is_refused():
    with pytest.raises(RuntimeError, match="inside the transaction"), held_writes():
        pass
