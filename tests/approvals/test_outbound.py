"""Server-side request forgery through an agent's card URL.

An agent's card URL is what a (possibly hostile) tenant admin registers; its card's interfaces are what
the agent says. The worker calls them with the agent's outbound credentials, so each must reach only a
host the operator allowed (approvals/a2a/outbound.py). Each test calls over real sockets on loopback with
real DNS resolution (`localhost`), and proves the refused call never connected: a listener that stands
for Redis or an internal service accepts nothing.
"""

import asyncio
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from approvals.a2a import outbound
from approvals.a2a.client import forget_cards
from approvals.models import OutboxMessage
from approvals.worker.loop import Worker
from tests import factories
from tests.approvals.test_worker import approve, continuation

pytestmark = pytest.mark.django_db


class Listener:
    """A TCP port that records whether anyone connected (Redis, a database, an internal admin page)."""

    def __init__(self, host="127.0.0.1"):
        self.socket = socket.socket()
        self.socket.bind((host, 0))
        self.socket.listen(8)
        self.socket.setblocking(False)
        self.port = self.socket.getsockname()[1]

    def was_connected(self) -> bool:
        try:
            connection, _ = self.socket.accept()
        except BlockingIOError:
            return False
        connection.close()
        return True

    def close(self):
        self.socket.close()


@pytest.fixture
def listener():
    port = Listener()
    forget_cards()
    yield port
    port.close()


def _get(url: str, timeout=5, **options) -> httpx.Response:
    async def run():
        async with outbound.async_client(timeout=timeout, **options) as client:
            return await client.get(url)

    return asyncio.run(run())


def test_the_worker_never_calls_a_loopback_card_url_nobody_allowed(
    listener, tenant, refund_policy, requester, reviewer_a, settings, caplog
):
    settings.AGENT_ALLOWED_HOSTS, settings.AGENT_ALLOWED_NETWORKS = ["agents.example.com"], []
    agent = factories.make_agent(
        tenant, card_url=f"http://127.0.0.1:{listener.port}/.well-known/agent-card.json"
    )
    proposal, _ = approve(agent, reviewer_a, ("task-1", "ctx-1"))

    report = Worker().tick()

    assert report.failed == 1
    assert not listener.was_connected()
    message = continuation(proposal)
    assert message.status == OutboxMessage.Status.PENDING
    # Generic in the outbox (and so in the evidence packet): no address, no port, no socket error.
    assert "not allowed" in message.last_error
    assert str(listener.port) not in message.last_error and "127.0.0.1" not in message.last_error
    assert "127.0.0.1" in caplog.text  # the detail is in the worker's log


def test_a_name_on_the_allow_list_that_resolves_to_loopback_is_refused(listener, settings):
    # Checked after DNS resolution: the name is allowed, the address it resolves to is not public.
    settings.AGENT_ALLOWED_HOSTS, settings.AGENT_ALLOWED_NETWORKS = ["localhost"], []

    with pytest.raises(outbound.HostNotAllowed, match="private or loopback"):
        _get(f"http://localhost:{listener.port}/")

    assert not listener.was_connected()


@pytest.mark.parametrize(
    "address",
    ["169.254.169.254", "[fe80::1]", "[::ffff:169.254.169.254]", "100.100.100.200", "0.0.0.0"],  # noqa: S104
)
def test_link_local_and_metadata_addresses_are_never_called_even_inside_an_allowed_network(address, settings):
    settings.AGENT_ALLOWED_HOSTS = [address.strip("[]")]
    settings.AGENT_ALLOWED_NETWORKS = ["0.0.0.0/0", "::/0"]

    with pytest.raises(outbound.HostNotAllowed):
        _get(f"http://{address}/latest/meta-data/iam/security-credentials/")


class _Redirect(BaseHTTPRequestHandler):
    target = ""

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(302)
        self.send_header("Location", self.target)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def redirecting_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Redirect)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("target", ["internal", "metadata"])
def test_every_redirect_is_checked_again(redirecting_server, settings, target):
    internal = Listener("127.0.0.2")  # another loopback address: not in the allowed network below
    try:
        _Redirect.target = (
            f"http://127.0.0.2:{internal.port}/" if target == "internal" else "http://169.254.169.254/"
        )
        settings.AGENT_ALLOWED_HOSTS, settings.AGENT_ALLOWED_NETWORKS = [], ["127.0.0.1/32"]

        with pytest.raises(outbound.HostNotAllowed):
            _get(f"http://127.0.0.1:{redirecting_server.server_port}/", follow_redirects=True)

        assert not internal.was_connected()
    finally:
        internal.close()


def test_an_explicitly_allowed_loopback_network_is_called(listener, settings):
    settings.AGENT_ALLOWED_HOSTS, settings.AGENT_ALLOWED_NETWORKS = [], ["127.0.0.0/8"]

    with pytest.raises(httpx.HTTPError):  # the listener speaks no HTTP; what matters is that it was reached
        _get(f"http://127.0.0.1:{listener.port}/", timeout=httpx.Timeout(5, read=0.5))

    assert listener.was_connected()
