"""Concurrent writers never fork a chain: each append locks the chain head (PostgreSQL, real threads,
each with its own connection)."""

import threading

import pytest
from django.db import connection, connections, transaction

from audit.chain.accept import append
from audit.chain.verification import verify_chain
from audit.models import AuditEvent, ChainHead, Checkpoint

WRITERS = 8
EVENTS_EACH = 25


@pytest.mark.postgres
@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="row locks and real concurrency need PostgreSQL"
)
@pytest.mark.django_db(transaction=True)
def test_eight_concurrent_writers_append_one_unforked_chain_that_verifies(settings):
    settings.AUDIT_CHECKPOINT_EVERY = 20
    chain = "tenant:concurrency"
    start = threading.Barrier(WRITERS)
    errors: list[BaseException] = []

    def writer(number: int) -> None:
        try:
            start.wait(timeout=30)  # all threads hit the empty chain at once, head creation included
            for index in range(EVENTS_EACH):
                with transaction.atomic():
                    append(
                        chain,
                        actor=f"agent:writer-{number}",
                        verb="proposal.submitted",
                        subject=f"proposal:{number}-{index}",
                        data={"writer": number, "index": index},
                    )
        except BaseException as error:  # reported by the main thread
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert not errors, errors
    total = WRITERS * EVENTS_EACH
    assert list(AuditEvent.objects.filter(chain=chain).order_by("seq").values_list("seq", flat=True)) == list(
        range(1, total + 1)
    )
    assert ChainHead.objects.get(chain=chain).seq == total
    assert Checkpoint.objects.filter(chain=chain).count() == total // 20
    result = verify_chain(chain)
    assert result.ok, result.problems
    assert result.events == total
