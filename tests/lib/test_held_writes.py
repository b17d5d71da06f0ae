"""lib/storage/held_writes.py: writes held inside the block reach the database in their order, before any
other statement of the connection (so a read in between sees them), in one round trip on PostgreSQL,
and not at all when the block fails."""

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from lib.storage.held_writes import held_writes, write

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


# --- the COMMIT is the transaction's own ----------------------------------------------------------------


@pytest.fixture
def committed_numbers():
    """A real table (the transactional tests commit): another connection reads what was committed."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE held_numbers (n integer PRIMARY KEY)")
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE held_numbers")


def committed_elsewhere() -> list[int]:
    """What another connection sees: only committed rows."""
    from django.db import connections

    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT n FROM held_numbers ORDER BY n")
            return [row[0] for row in cursor.fetchall()]
    finally:
        other.close()


postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="one round trip for several statements is PostgreSQL's"
)


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_the_writes_commit_with_their_transaction_and_the_on_commit_hooks_see_them(committed_numbers):
    ran = []
    with transaction.atomic():
        with held_writes():
            insert(1)
            insert(2)
            transaction.on_commit(lambda: ran.append(committed_elsewhere()))
        assert committed_elsewhere() == []  # sent when the block ended; committed by the atomic's end
    assert ran == [[1, 2]]
    assert stored() == [1, 2]


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_commit_that_fails_fails_the_transaction_and_nothing_stays(committed_numbers):
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE held_refs (n integer REFERENCES held_numbers (n) DEFERRABLE INITIALLY DEFERRED)"
        )
    try:
        with pytest.raises(IntegrityError), transaction.atomic(), held_writes():
            insert(3)
            write("INSERT INTO held_refs (n) VALUES (%s)", [99])  # refused only at COMMIT
        assert committed_elsewhere() == []
        assert stored() == []  # the connection is usable again
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE held_refs")


def test_the_block_never_ends_an_enclosing_transaction(numbers):
    # (a test runs inside a transaction: the block's atomic is a savepoint of it)
    with transaction.atomic(), held_writes():
        insert(4)
    if connection.vendor == "postgresql":
        from psycopg.pq import TransactionStatus

        # still inside the test's transaction: the block sent no COMMIT
        assert connection.connection.info.transaction_status == TransactionStatus.INTRANS
    assert stored() == [4]
