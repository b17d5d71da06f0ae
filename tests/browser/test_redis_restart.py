"""Redis restarts while a reviewer has the queue open: the page says it is reconnecting, the socket comes
back on its own once Redis is up, and it re-reads the state, so a proposal submitted while Redis was
down appears without a reload. Nothing is lost: the proposal was committed (its broadcast failed and
was dropped, see approvals/events.py), and the reconnect's first message is the queue as it is now.

This module runs its own redis-server on a free loopback port (never the machine's shared Redis), and
Daphne and this process both use it as their channel layer.
"""

import shutil
import subprocess

import pytest
import redis
from playwright.sync_api import expect

from tests.browser.conftest import beside_the_browser, daphne_server
from tests.browser.test_reviewing import sign_in, wait_until_live
from tests.examples.harness import free_port, stop_process
from tests.factories import submit
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not shutil.which("redis-server"), reason="needs redis-server (apt-get install redis)"),
]

# htmx's WebSocket extension retries with a jittered backoff (up to 2^n s): give the reconnect room.
RECONNECT_SECONDS = 40


class PrivateRedis:
    """A redis-server of this test only: no persistence, loopback, one fixed port across restarts."""

    def __init__(self, folder):
        self.folder, self.port = folder, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port)]
            + ["--save", "", "--appendonly", "no"],
            cwd=self.folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_until(self.answers, f"redis-server on port {self.port} answers PING")

    def answers(self) -> bool:
        try:
            return redis.Redis.from_url(self.url, socket_connect_timeout=1).ping()
        except redis.ConnectionError:
            return False

    def stop(self) -> None:
        stop_process(self.process)


@pytest.fixture(scope="module")
def private_redis(tmp_path_factory):
    server = PrivateRedis(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def live_server_url(django_db_setup, django_db_blocker, tmp_path_factory, private_redis):
    """Daphne on the private Redis (this overrides the conftest's Daphne for this module)."""
    with daphne_server(tmp_path_factory, REDIS_URL=private_redis.url) as url:
        yield url


@pytest.fixture(autouse=True)
def _shared_channel_layer(settings, private_redis):
    """This process publishes to the private Redis too (overrides the conftest's fixture)."""
    from tests.browser.conftest import CHANNELS_PREFIX

    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{"address": private_redis.url, "socket_timeout": 30, "socket_connect_timeout": 2}],
                "prefix": CHANNELS_PREFIX,
            },
        }
    }


def test_after_a_redis_restart_the_queue_reconnects_and_shows_what_came_meanwhile(
    new_page, private_redis, agent, refund_policy, requester, reviewer_a
):
    page = new_page()
    sign_in(page, reviewer_a)
    wait_until_live(page)
    expect(page.locator("#queue-count")).to_have_text("0 proposals waiting for you")
    page.evaluate("window.notReloaded = true")

    private_redis.stop()
    status = page.locator("[data-live-status]")
    expect(status).to_have_attribute("data-state", "down", timeout=RECONNECT_SECONDS * 1000)

    # Submitted while Redis is down: committed; its broadcast fails and is dropped, not raised.
    proposal = beside_the_browser(submit, agent, summary="Refund EUR 4.20 to order 2718")

    private_redis.start()
    expect(status).to_have_attribute("data-state", "live", timeout=RECONNECT_SECONDS * 1000)
    row = page.locator(
        "tr", has=page.locator("q", has_text="Refund EUR 4.20 to order 2718")
    )  # the agent's words
    expect(row.locator("a.proposal-link")).to_have_attribute("href", f"/proposals/{proposal.id}/")
    expect(page.locator("#queue-count")).to_have_text("1 proposal waiting for you")
    assert page.evaluate("window.notReloaded")  # the socket re-read the state; no reload

    # And it is live again, not only re-read: the next proposal arrives over the restarted Redis.
    beside_the_browser(submit, agent, summary="Refund EUR 3.14 to order 1618")
    expect(page.locator("q", has_text="Refund EUR 3.14 to order 1618")).to_be_visible()
    expect(page.locator("#queue-count")).to_have_text("2 proposals waiting for you")
