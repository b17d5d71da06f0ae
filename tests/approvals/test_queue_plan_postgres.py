"""On PostgreSQL, the queue's and the watching list's page queries read an index in the list's order
and stop after one page: no sequential scan and no sort over every proposal; their counts and the
queue's risk chips stop at the cap."""

import pytest
from django.conf import settings
from django.db import connection

from approvals.web import queries
from approvals.web.list_pages import PAGE_SIZE, QUEUE_ORDER, WATCHING_ORDER
from tests import factories
from tests.factories import submit
from tests.query_plans import plan_of

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        not settings.IS_POSTGRES,
        reason="EXPLAIN plans are PostgreSQL's (set DATABASE_URL)",
    ),
    pytest.mark.django_db,
]


@pytest.mark.parametrize(
    "person, build, order, index",
    [
        ("reviewer_a", queries.eligible_proposals, QUEUE_ORDER, "_by_urgency"),
        ("reviewer_c", queries.watching_proposals, WATCHING_ORDER, "watching_by_recency"),
    ],
)
def test_a_list_page_reads_an_index_in_order_not_every_proposal(
    request, agent, refund_policy, requester, reviewer_a, reviewer_c, person, build, order, index
):
    factories.clone_waiting(submit(agent), 20_000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE approvals_proposal")
    scope = queries.ReviewerScope.of(request.getfixturevalue(person))
    page = queries.with_row_data(build(scope)).order_by(*order)[: PAGE_SIZE + 1]
    plan = plan_of(page)
    assert plan.lstrip().startswith("Limit"), plan
    assert index in plan, plan  # waiting_by_urgency or queue_by_urgency for the queue
    assert "Seq Scan on approvals_proposal" not in plan, plan
    assert "Sort" not in plan.split("->")[1], plan  # the rows come sorted from the index


def test_the_queues_next_page_reads_the_index_from_the_cursor_on(agent, refund_policy, requester, reviewer_a):
    """The page after a cursor (expires_at, -risk_rank, id) is read from the same index, not sorted."""
    factories.clone_waiting(submit(agent), 20_000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE approvals_proposal")
    listed = queries.with_row_data(queries.eligible_proposals(queries.ReviewerScope.of(reviewer_a)))
    first = queries.keyset_page(listed, QUEUE_ORDER, "", PAGE_SIZE)
    values = queries.decode_cursor(first.next_cursor, QUEUE_ORDER)
    assert values is not None
    page = listed.filter(queries.rows_after(QUEUE_ORDER, values)).order_by(*QUEUE_ORDER)
    plan = plan_of(page[: PAGE_SIZE + 1])
    assert plan.lstrip().startswith("Limit"), plan
    assert "_by_urgency" in plan, plan
    assert "Seq Scan on approvals_proposal" not in plan, plan
    assert "Sort" not in plan.split("->")[1], plan


@pytest.mark.parametrize(
    "person, build",
    [("reviewer_a", queries.eligible_proposals), ("reviewer_c", queries.watching_proposals)],
)
def test_a_lists_count_stops_at_its_cap_instead_of_counting_every_proposal(
    request, agent, refund_policy, requester, reviewer_a, reviewer_c, person, build
):
    """The count ("1000+") and the queue's risk chips read at most COUNT_CAP + 1 rows: a Limit under the
    aggregate, whatever the number of proposals."""
    factories.clone_waiting(submit(agent), 5_000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE approvals_proposal")
    listed = build(queries.ReviewerScope.of(request.getfixturevalue(person))).order_by()
    count = listed[: queries.COUNT_CAP + 1]
    sql, params = count.query.sql_with_params()
    with connection.cursor() as cursor:  # the SQL of capped_count: COUNT(*) over the LIMIT subquery
        cursor.execute(f"EXPLAIN SELECT COUNT(*) FROM ({sql}) AS capped", params)  # noqa: S608
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert plan.lstrip().startswith("Aggregate"), plan
    assert plan.split("->")[1].strip().startswith("Limit"), plan
    assert queries.capped_count(listed) == (queries.COUNT_CAP, True)
    chips = plan_of(listed.values_list("risk", flat=True)[: queries.COUNT_CAP + 1])
    assert chips.lstrip().startswith("Limit"), chips
