"""The proposal page reads what it shows once. The person's role and whether they are the principal come
with the proposal's own read (approvals.selectors.proposal_for_user), as do its follow-up and its signed
decision (selectors.PAGE_JOINS); the threshold groups serve the eligibility, "your groups" and the
quorum; the pinned versions serve "why" and the break-glass rule."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from approvals.selectors import proposal_for_user
from approvals.web.pages import detail_context
from tests import factories
from tests.factories import submit, verified_client

pytestmark = pytest.mark.django_db

# A waiting proposal with nothing on its target before it, opened by a reviewer who can decide it: the
# session, the user, the identity providers requiring sign-in there, the device (the middleware and the
# sign-in guard); the proposal with the person's membership, follow-up and decision; the threshold
# groups; the quorum's approvals, principals and stand-ins; the votes; a break-glass release (with its
# post-hoc reviews when there is one: the person's own is taken from there); the person's groups and
# stand-in row; the pinned versions; the history; the successor; whether they have a passkey, and
# without one, an authenticator app or backup codes (else the panel leads them to set one up); whether
# the tenant confirms votes at its provider; the standing grants it did not fit (approvals/web/grants.py).
DETAIL_PAGE_QUERIES = 20


def test_the_proposal_page_makes_a_known_number_of_queries(agent, refund_policy, requester, reviewer_a):
    proposal = submit(agent)
    client = verified_client(reviewer_a)
    url = reverse("approvals:detail", args=[proposal.id])
    client.get(url)  # the session's first request may write it
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200 and b'id="decision-form"' in response.content
    tables = [query["sql"].split(" FROM ", 1)[-1].split(" ", 1)[0] for query in captured]
    for table in (
        '"approvals_followup"',
        '"approvals_decision"',
        '"approvals_policyversion"',
        '"approvals_posthocreview"',
    ):
        assert tables.count(table) <= 1, (table, tables)
    assert tables.count('"approvals_approvergroup"') == 1
    assert tables.count('"approvals_tenantmembership"') == 1  # the quorum's principals; the role came along
    assert len(captured) == DETAIL_PAGE_QUERIES, [query["sql"][:120] for query in captured]


def test_the_page_joins_its_decision_and_follow_up(agent, refund_policy, requester, reviewer_a, reviewer_b):
    proposal = submit(agent)
    factories.vote(proposal, reviewer_b)  # one approval: released, with a signed decision
    joined = proposal_for_user(proposal.id, reviewer_a, for_page=True)
    with CaptureQueriesContext(connection) as captured:
        decision = joined.decision
        follow_up = joined.follow_up
    assert len(captured) == 0
    assert decision.proposal_id == proposal.id and follow_up.proposal_id == proposal.id
    context = detail_context(joined, reviewer_a, {})
    assert context["decision"] == decision and context["successor"] is None


def test_the_membership_read_with_the_proposal_counts_only_for_the_person_it_was_read_for(
    agent, refund_policy, requester, reviewer_a
):
    """Separation of duties on the page: the requester is this proposal's principal. Read for a
    reviewer, the proposal carries the reviewer's membership, which must not answer for the requester."""
    proposal = submit(agent)
    read_for_reviewer = proposal_for_user(proposal.id, reviewer_a)
    assert detail_context(read_for_reviewer, reviewer_a, {})["decision_panel"]["mode"] == "vote"
    panel = detail_context(read_for_reviewer, requester, {})["decision_panel"]
    assert panel["mode"] == "ineligible" and "the person this action is for" in panel["why_not"]
    read_for_requester = proposal_for_user(proposal.id, requester)
    assert detail_context(read_for_requester, requester, {})["decision_panel"]["mode"] == "ineligible"
