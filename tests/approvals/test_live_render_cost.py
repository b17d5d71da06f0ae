"""What a change's live message costs the process that commits it (approvals/live/broadcast.py,
approvals/events.py): a proposal created in the transaction is announced with the bare hint and no
render (nobody can have its page open before the commit), and a proposal nobody has open (no page
socket: approvals/models/live.py PageWatcher) costs one small query, not the page's reads. The page's
sockets keep those rows themselves."""

from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.utils import timezone

from approvals import events
from approvals.live import broadcast
from approvals.models import PageWatcher
from approvals.services.page_watchers import STALE_AFTER, forget_stale, watch
from lib import group_listeners as listeners
from tests import factories
from tests.approvals.test_consumers import _own_channel_prefix, connected, proposal_path, sign_in  # noqa: F401
from tests.factories import submit

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def page_listener():
    """Registers a listener on a group (lib/group_listeners.py), as a page socket does; unregistered
    at the test's end."""
    joined: list[str] = []

    def join(group: str) -> None:
        listeners.join("a-page-socket", [group])
        joined.append(group)

    yield join
    listeners.leave("a-page-socket", joined)


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
    agent, refund_policy, requester, renders, page_listener
):
    first = submit(agent, task_id="task-1", request_id="first")
    assert renders == []
    page_listener(events.proposal_group(first.id))  # its page is open (lib/group_listeners.py)
    second = submit(agent, task_id="task-1", request_id="second", supersedes="first")
    assert second.supersedes_id == first.id
    assert renders == [str(first.id)]  # the superseded page may be open; the new one cannot be


def test_a_tenant_with_no_members_costs_one_query_and_gets_the_hint(django_assert_num_queries):
    agent = factories.make_agent(factories.make_tenant(slug="agents-only"))
    proposal = submit(agent)
    with django_assert_num_queries(1):
        message = broadcast.rendered_message(proposal.id)
    assert set(message) == {"type", "proposal_id", "event"}  # the bare hint, as changed_message gives it


def test_a_proposal_nobody_has_open_costs_one_query_and_gets_the_hint(
    agent, refund_policy, requester, reviewer_b, django_assert_num_queries
):
    proposal = submit(agent)  # its tenant has reviewers, none of them on its page
    with django_assert_num_queries(1):
        message = broadcast.rendered_message(proposal.id)
    assert set(message) == {"type", "proposal_id", "event"}


def test_a_watched_proposal_is_rendered_for_the_people_watching_it(
    agent, refund_policy, requester, reviewer_a, reviewer_b
):
    proposal = submit(agent)
    watch(proposal.id, reviewer_b.pk, "socket-of-b")
    message = broadcast.rendered_message(proposal.id)
    assert {"shared", "audiences", "people"} <= set(message)
    assert set(message["people"]) == {str(reviewer_b.id)}  # reviewer_a is a member, not on the page


async def test_a_page_socket_is_a_watcher_from_its_first_read_until_it_disconnects(
    agent, refund_policy, requester, reviewer_b
):
    proposal = await database_sync_to_async(submit)(agent)
    page = await connected(proposal_path(proposal), await database_sync_to_async(sign_in)(reviewer_b))

    @database_sync_to_async
    def watchers():
        return list(PageWatcher.objects.filter(proposal=proposal).values_list("user_id", flat=True))

    assert await watchers() == [reviewer_b.pk]
    await page.disconnect()
    assert await watchers() == []


def test_the_worker_forgets_watchers_left_by_a_killed_process(agent, refund_policy, requester, reviewer_b):
    proposal = submit(agent)
    watch(proposal.id, reviewer_b.pk, "socket-of-a-killed-daphne")
    watch(proposal.id, reviewer_b.pk, "socket-open-now")
    PageWatcher.objects.filter(channel_name="socket-of-a-killed-daphne").update(
        opened_at=timezone.now() - STALE_AFTER - timedelta(minutes=1)
    )
    assert forget_stale() == 1
    assert list(PageWatcher.objects.values_list("channel_name", flat=True)) == ["socket-open-now"]
