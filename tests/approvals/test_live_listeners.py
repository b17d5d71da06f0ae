"""The listener registry (lib/group_listeners.py) and the broadcasts that ask it (approvals/events.py):
a group nobody listens on gets no send, and a proposal page nobody listens on no render; a group somebody
listens on gets its message; when the registry cannot be read, everything is sent. On a real Redis
(REDIS_URL); the one fault, a Redis that does not answer, is a real closed port, not a mock."""

import uuid

import pytest
import redis
from channels.db import database_sync_to_async
from django.conf import settings as django_settings
from django.db import transaction

from approvals import events
from lib import group_listeners as listeners
from tests.approvals.test_consumers import (  # noqa: F401 (a fixture)
    _own_channel_prefix,
    connected,
    proposal_path,
    sign_in,
)
from tests.approvals.test_live_render_cost import renders  # noqa: F401 (a fixture)
from tests.factories import submit

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not django_settings.REDIS_URL, reason="needs Redis (REDIS_URL)"),
]


@pytest.fixture
def registry(settings):
    """A registry of this test's own (a process of its own), on the layer's Redis under a prefix of
    its own; its listeners are unregistered at the end."""
    layer = settings.CHANNEL_LAYERS["default"]
    settings.CHANNEL_LAYERS = {
        "default": {**layer, "CONFIG": {**layer["CONFIG"], "prefix": f"listeners-{uuid.uuid4().hex[:8]}"}}
    }
    own = listeners.Registry()
    yield own
    for groups in list(own._local.values()):
        for group, members in list(groups.items()):
            for member in list(members):
                own.leave(member, [group])


def redis_of(settings) -> tuple[redis.Redis, str]:
    config = settings.CHANNEL_LAYERS["default"]["CONFIG"]
    return redis.Redis.from_url(config["hosts"][0]["address"]), config["prefix"]


def test_a_listener_is_registered_until_it_leaves(registry, settings):
    client, prefix = redis_of(settings)
    registry.join("socket-1", ["proposal-a", "person-1"])
    registry.join("socket-2", ["proposal-a"])
    assert registry.listened(["proposal-a", "person-1", "proposal-b"]) == {"proposal-a", "person-1"}
    assert 0 < client.ttl(listeners.Registry.key(prefix, "proposal-a")) <= listeners.TTL  # it expires

    registry.leave("socket-1", ["proposal-a", "person-1"])
    assert registry.listened(["proposal-a", "person-1"]) == {"proposal-a"}  # socket-2 still listens
    registry.leave("socket-2", ["proposal-a"])
    assert registry.listened(["proposal-a", "person-1"]) == set()
    assert client.exists(listeners.Registry.key(prefix, "proposal-a")) == 0


def test_a_dead_process_entries_expire_and_a_live_one_refreshes_its_own(registry, settings):
    """A process that crashed never refreshes: its set's expiry runs out (set here to what is left of it
    after TTL, as Redis would find it). A live process puts its own listeners back and pushes the expiry
    back at each refresh, also after Redis lost the keys."""
    client, prefix = redis_of(settings)
    crashed = listeners.Registry()  # never refreshes in this test, never leaves
    crashed.join("socket-of-a-killed-daphne", ["person-9"])
    crashed._local.clear()  # the process is gone: nothing of it will refresh or leave
    key = listeners.Registry.key(prefix, "person-9")
    client.pexpire(key, 1)  # its TTL ran out
    while client.exists(key):  # Redis removes it within its own expiry cycle
        pass
    assert registry.listened(["person-9"]) == set()

    registry.join("socket-open-now", ["person-9", "proposal-c"])
    client.delete(listeners.Registry.key(prefix, "proposal-c"))  # as after a Redis restart
    client.expire(key, 3)
    registry.refresh()
    assert registry.listened(["person-9", "proposal-c"]) == {"person-9", "proposal-c"}
    assert client.ttl(key) > 3


@pytest.fixture
def sent(monkeypatch) -> list:
    """The groups each broadcast went to, in order (the real send still runs)."""
    groups: list = []
    real = events._send_all

    def spy(messages):
        groups.append([group for group, _ in messages])
        real(messages)

    monkeypatch.setattr(events, "_send_all", spy)
    return groups


def change(proposal) -> None:
    with transaction.atomic():
        events.proposal_changed(proposal)


def test_a_change_nobody_watches_is_neither_rendered_nor_sent(
    registry,
    agent,
    refund_policy,
    sent,
    renders,  # noqa: F811 (the imported fixture, requested by name)
):
    proposal = submit(agent)
    sent.clear()
    change(proposal)
    assert sent == [] and renders == []

    registry.join("a-queue-socket", [events.tenant_group(proposal.tenant_id)])
    change(proposal)
    assert sent == [[events.tenant_group(proposal.tenant_id)]] and renders == []  # the queue's hint only

    registry.join("a-page-socket", [events.proposal_group(proposal.id)])
    change(proposal)
    assert sent[-1] == [events.proposal_group(proposal.id), events.tenant_group(proposal.tenant_id)]
    assert renders == [str(proposal.id)]


def test_access_facts_go_only_to_a_person_with_a_page_open(registry, reviewer_a, sent):
    with transaction.atomic():
        events.access_facts_changed(user_id=reviewer_a.pk, session_key="k")
    assert sent == []  # nobody to tell
    registry.join("a-socket", [events.person_group(reviewer_a.pk)])
    with transaction.atomic():
        events.access_facts_changed(user_id=reviewer_a.pk, session_key="k")
    assert sent[-1] == [events.person_group(reviewer_a.pk)]


def test_a_registry_that_cannot_be_read_sends_everything(
    settings,
    agent,
    refund_policy,
    sent,
    renders,  # noqa: F811 (the imported fixture, requested by name)
):
    """A Redis that does not answer (a port nothing listens on): every group is sent to, rendered page
    included (the sends then fail too, and are logged)."""
    proposal = submit(agent)
    sent.clear()
    settings.CHANNEL_LAYERS = {
        "default": {
            **settings.CHANNEL_LAYERS["default"],
            "CONFIG": {"hosts": [{"address": "redis://127.0.0.1:1/0"}], "prefix": "nobody-home"},
        }
    }
    assert listeners.listened(["proposal-x", "tenant-y"]) == {"proposal-x", "tenant-y"}
    change(proposal)
    assert sent == [[events.proposal_group(proposal.id), events.tenant_group(proposal.tenant_id)]]
    assert renders == [str(proposal.id)]


def test_no_redis_layer_means_every_group_is_listened_on(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    assert listeners.listened(["proposal-x", "tenant-y"]) == {"proposal-x", "tenant-y"}
    listeners.join("a-socket", ["proposal-x"])  # nothing to keep: no error


async def test_a_page_socket_listens_before_its_first_read_and_stops_when_it_closes(
    settings, agent, refund_policy, requester, reviewer_b
):
    """Registered in authorize(), before the groups are joined and the page is read (connect), so a
    change committed after that read is sent to it; unregistered on disconnect."""
    proposal = await database_sync_to_async(submit)(agent)
    groups = [events.proposal_group(proposal.id), events.person_group(reviewer_b.pk)]
    assert await database_sync_to_async(listeners.listened)(groups) == set()
    page = await connected(proposal_path(proposal), await database_sync_to_async(sign_in)(reviewer_b))
    assert await database_sync_to_async(listeners.listened)(groups) == set(groups)
    await page.disconnect()
    assert await database_sync_to_async(listeners.listened)(groups) == set()


async def test_a_queue_socket_listens_on_its_tenants_until_it_closes(
    agent, refund_policy, requester, reviewer_b
):
    await database_sync_to_async(submit)(agent)
    queue = events.tenant_group(agent.tenant_id)
    page = await connected("/ws/queue/", await database_sync_to_async(sign_in)(reviewer_b))
    assert await database_sync_to_async(listeners.listened)([queue]) == {queue}
    await page.disconnect()
    assert await database_sync_to_async(listeners.listened)([queue]) == set()
