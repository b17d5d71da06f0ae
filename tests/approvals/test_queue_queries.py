"""The queue and the watching list cost the same number of queries for 5 proposals as for 200, and the
queue page a known number."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.approvals.test_views import verified_client
from tests.factories import submit

pytestmark = pytest.mark.django_db


def queries_for(client, url, params=None) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, params or {})
    assert response.status_code == 200
    return len(captured)


@pytest.mark.parametrize(
    "page, person, params",
    [
        ("approvals:queue", "reviewer_a", {}),
        ("approvals:queue", "reviewer_a", {"tenant": "acme", "policy": "refunds"}),
        ("approvals:watching", "reviewer_c", {}),
        ("approvals:watching", "reviewer_c", {"state": "awaiting_review", "agent": "refund-demo"}),
    ],
)
def test_list_pages_make_a_constant_number_of_queries(
    request,
    django_assert_num_queries,
    agent,
    refund_policy,
    requester,
    reviewer_a,
    reviewer_c,
    page,
    person,
    params,
    settings,
):
    settings.AGENT_INTAKE_BURST = 200  # one agent sends the whole page at once here: no quota in the way
    client = verified_client(request.getfixturevalue(person))
    url = reverse(page)
    for _ in range(5):
        submit(agent)
    few = queries_for(client, url, params)
    for _ in range(195):
        submit(agent)
    with django_assert_num_queries(few):
        response = client.get(url, params)
    assert response.content.decode().count('class="proposal-link"') == 25  # one full page of 200


# The queue page of a reviewer (no delegation held, no post-hoc review owed): the session, the user, the
# identity providers requiring sign-in there, the device (the middleware and the sign-in guard); their
# memberships (which also decide the compliance redirect), groups, delegations and stand-in rows
# (queries.ReviewerScope); the filter form's agents and policies; the page; the risk chips (which give
# the count); the page's likely duplicates and pinned policy versions (one query each for all rows); the
# post-hoc reviews owed (a bare look).
QUEUE_PAGE_QUERIES = 15


def test_the_queue_page_makes_a_known_number_of_queries(
    django_assert_num_queries, agent, refund_policy, requester, reviewer_a, settings
):
    settings.AGENT_INTAKE_BURST = 200
    for _ in range(30):
        submit(agent)
    client = verified_client(reviewer_a)
    client.get(reverse("approvals:queue"))  # the session's first request may write it
    with django_assert_num_queries(QUEUE_PAGE_QUERIES):
        response = client.get(reverse("approvals:queue"))
    html = response.content.decode()
    assert html.count('class="proposal-link"') == 25
    # Each row names the policy versions it pinned (read for the whole page at once).
    assert html.count(f" · refunds@{refund_policy.version}</div>") == 25
