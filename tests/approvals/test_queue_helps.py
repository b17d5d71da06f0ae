"""The queue helps: search by target (however spelled), agent or tool; an amount column; a marker for a
likely duplicate and for rows new since the page opened; rows that follow an edit."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from approvals.web.list_pages import queue_context
from tests import factories
from tests.factories import approve, submit, verified_client

pytestmark = pytest.mark.django_db


def _rows(reviewer, **params):
    return {row["proposal"].pk: row for row in queue_context(reviewer, params)["rows"]}


def test_the_queue_searches_by_target_however_spelled_agent_and_tool(
    agent, refund_policy, requester, reviewer_a
):
    mine = submit(agent, action=factories.refund_action("1182"))
    other = submit(agent, action=factories.refund_action("9999"))
    assert set(_rows(reviewer_a, q="order:1182")) == {mine.pk}
    assert set(_rows(reviewer_a, q="order_id=1182")) == {mine.pk}
    assert set(_rows(reviewer_a, q="refund demo")) == {mine.pk, other.pk}  # the agent's name
    assert set(_rows(reviewer_a, q="payments.refund")) == {mine.pk, other.pk}
    assert set(_rows(reviewer_a, q="nothing-like-this")) == set()
    html = verified_client(reviewer_a).get(reverse("approvals:queue"), {"q": "1182"}).content.decode()
    assert 'data-label="Amount"><span class="amount">' in html and "EUR 40.00" in html


def test_a_row_is_marked_when_another_proposal_on_its_target_was_done_or_waits(
    agent, refund_policy, requester, reviewer_a, reviewer_b
):
    approve(agent, reviewer_b)  # order 1182, approved
    again = submit(agent)  # the same order, another task
    alone = submit(agent, action=factories.refund_action("5555"))
    rows = _rows(reviewer_a)
    assert rows[again.pk]["duplicate_of"] and not rows[alone.pk]["duplicate_of"]
    html = verified_client(reviewer_a).get(reverse("approvals:queue")).content.decode()
    assert html.count("Likely duplicate") == 1


def test_rows_that_arrived_after_the_page_opened_are_marked_new_and_counted(
    agent, refund_policy, requester, reviewer_a
):
    old = submit(agent, action=factories.refund_action("1"))
    opened = timezone.now()
    new = submit(agent, action=factories.refund_action("2"))
    context = queue_context(reviewer_a, {"opened": opened.isoformat()})
    rows = {row["proposal"].pk: row for row in context["rows"]}
    assert rows[new.pk]["new"] and not rows[old.pk]["new"]
    assert context["new_count"] == 1
    # The first render (no `opened`) marks nothing; a page opened later marks nothing either.
    assert not any(row["new"] for row in queue_context(reviewer_a, {})["rows"])
    later = (timezone.now() + timedelta(seconds=5)).isoformat()
    assert queue_context(reviewer_a, {"opened": later})["new_count"] == 0
