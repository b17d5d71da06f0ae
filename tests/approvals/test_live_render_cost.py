"""What a change's live message costs the process that commits it (approvals/live/broadcast.py,
approvals/events.py): a proposal created in the transaction is announced with the bare hint and no
render (nobody can have its page open before the commit), and a tenant with nobody to show a page to
costs one small query, not the page's reads."""

import pytest

from approvals import events
from approvals.live import broadcast
from tests import factories
from tests.factories import submit

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def renders(monkeypatch) -> list:
    """The proposals whose page message was rendered, in order."""
    rendered: list = []

    def renderer(proposal_id):
        rendered.append(str(proposal_id))
        return events.changed_message(proposal_id)

    monkeypatch.setattr(events, "_render", [renderer])
    return rendered


def test_a_new_proposal_is_announced_without_a_render_and_the_one_it_supersedes_with_one(
    agent, refund_policy, requester, renders
):
    first = submit(agent, task_id="task-1", request_id="first")
    assert renders == []
    second = submit(agent, task_id="task-1", request_id="second", supersedes="first")
    assert second.supersedes_id == first.id
    assert renders == [str(first.id)]  # the superseded page may be open; the new one cannot be


def test_a_tenant_with_no_members_costs_one_query_and_gets_the_hint(django_assert_num_queries):
    agent = factories.make_agent(factories.make_tenant(slug="agents-only"))
    proposal = submit(agent)
    with django_assert_num_queries(1):
        message = broadcast.rendered_message(proposal.id)
    assert set(message) == {"type", "proposal_id", "event"}  # the bare hint, as changed_message gives it


def test_a_tenant_with_members_gets_the_page_rendered(agent, refund_policy, requester, reviewer_b):
    proposal = submit(agent)
    message = broadcast.rendered_message(proposal.id)
    assert {"shared", "audiences", "people"} <= set(message)
    assert str(reviewer_b.id) in message["people"]
