"""The direct send's claim (approvals/storage/outbox.py: one `UPDATE … RETURNING`) gives what its ORM
twin gives (a conditional update, then a read): the same row, the same values and types, and nothing
when the row is not pending or not due. Run on SQLite and on PostgreSQL (DATABASE_URL)."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from approvals.models import OutboxMessage
from approvals.storage.outbox import claim_one
from tests import factories

pytestmark = pytest.mark.django_db


class _RolledBack(Exception):
    pass


def orm_twin(message_id: int, *, lease_until, now) -> OutboxMessage | None:
    won = OutboxMessage.objects.filter(
        pk=message_id, status=OutboxMessage.Status.PENDING, next_attempt_at__lte=now
    ).update(next_attempt_at=lease_until, attempts=F("attempts") + 1)
    return OutboxMessage.objects.get(pk=message_id) if won else None


def rolled_back(claim, message_id: int, **times):
    """The claim's result and the row as the claim left it, then undone (each claim sees the same row)."""
    result = []
    try:
        with transaction.atomic():
            claimed = claim(message_id, **times)
            result = [claimed, OutboxMessage.objects.get(pk=message_id)]
            raise _RolledBack
    except _RolledBack:
        pass
    return result


def values(row: OutboxMessage | None) -> dict | None:
    if row is None:
        return None
    return {field.attname: getattr(row, field.attname) for field in OutboxMessage._meta.concrete_fields}


@pytest.fixture
def message(agent, refund_policy, requester):
    proposal = factories.submit(agent)
    return OutboxMessage.objects.create(
        agent=agent,
        proposal=proposal,
        kind=OutboxMessage.Kind.GET_TASK,
        message_id="storage-twin",
        payload={"decision": "approved", "nested": [1, "é", None]},
        attempts=2,
        next_attempt_at=timezone.now() - timedelta(seconds=1),
        last_error="an earlier attempt",
    )


def claims(message, **times):
    return (
        rolled_back(claim_one, message.pk, **times),
        rolled_back(orm_twin, message.pk, **times),
    )


def test_a_due_pending_row_is_claimed_alike(message):
    now = timezone.now()
    (sql, sql_row), (orm, orm_row) = claims(message, lease_until=now + timedelta(seconds=90), now=now)

    assert values(sql) == values(orm) == values(orm_row) == values(sql_row)
    assert sql.attempts == 3 and sql.next_attempt_at == now + timedelta(seconds=90)
    assert sql.payload == {"decision": "approved", "nested": [1, "é", None]}  # JSON, not its text
    assert sql.next_attempt_at.tzinfo is not None and sql.created_at.tzinfo is not None
    assert not sql._state.adding and sql._state.db == orm._state.db


def test_a_row_not_yet_due_is_claimed_by_neither(message):
    early = message.next_attempt_at - timedelta(seconds=5)
    (sql, sql_row), (orm, orm_row) = claims(message, lease_until=early + timedelta(seconds=90), now=early)

    assert sql is None and orm is None
    assert values(sql_row) == values(orm_row) == values(message)


@pytest.mark.parametrize("status", [OutboxMessage.Status.DELIVERED, OutboxMessage.Status.DEAD])
def test_a_settled_row_is_claimed_by_neither(message, status):
    OutboxMessage.objects.filter(pk=message.pk).update(status=status)
    now = timezone.now()
    (sql, sql_row), (orm, orm_row) = claims(message, lease_until=now + timedelta(seconds=90), now=now)

    assert sql is None and orm is None
    assert values(sql_row) == values(orm_row)
