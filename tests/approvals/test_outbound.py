"""Server-side request forgery through an agent's card URL.

An agent's card URL is what a (possibly hostile) tenant admin registers; its card's interfaces are what
the agent says. The worker calls them with the agent's outbound credentials, so each must reach only a
host the operator allowed (lib/outbound.py). Each test calls over real sockets on loopback with
real DNS resolution (`localhost`), and proves the refused call never connected: a listener that stands
for Redis or an internal service accepts nothing.
"""

import asyncio
import ipaddress
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from approvals.a2a.client import forget_cards
from approvals.models import OutboxMessage
from approvals.worker.loop import Worker
from lib import outbound
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


def test_a_name_that_resolves_to_no_address_is_a_connect_error(monkeypatch, settings):
    # A resolver that answers with no address at all cannot be caused on loopback: mocked.
    settings.AGENT_ALLOWED_HOSTS, settings.AGENT_ALLOWED_NETWORKS = ["agents.example.com"], []

    async def no_addresses(host, port):
        return []

    monkeypatch.setattr(outbound, "allowed_addresses", no_addresses)

    with pytest.raises(httpx.ConnectError, match="resolves to no address"):
        _get("http://agents.example.com/")


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
        "64:ff9b::a00:5",  # NAT64 of 10.0.0.5
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        "64:ff9b:1::7f00:1",  # NAT64, local-use prefix
        "2002:7f00:1::1",  # 6to4 of 127.0.0.1
        "2002:808:808::1",  # 6to4, even of a public address: the tunnel's far end is not checked
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
        "::127.0.0.1",  # IPv4-compatible
        "::a00:5",  # IPv4-compatible 10.0.0.5
        "::ffff:127.0.0.1",  # IPv4-mapped
        "2001:db8::1",  # documentation
        "3fff::1",  # documentation
        "fd12:3456::1",  # unique local
        "fec0::1",  # site-local
        "100::1",  # discard-only
    ],
)
def test_ipv6_addresses_that_reach_an_ipv4_or_a_local_one_are_refused_for_an_allowed_host(address, settings):
    """The host is allowed, so only the address decides: each of these leads to loopback, a private
    network, the metadata service or an unchecked tunnel, though Python 3.11 calls several "global"."""
    settings.AGENT_ALLOWED_HOSTS, settings.AGENT_ALLOWED_NETWORKS = [address], []

    assert outbound.refusal(address, ipaddress.ip_address(address)) is not None
    with pytest.raises(outbound.HostNotAllowed):
        _get(f"http://[{address}]/")


def test_an_ipv6_address_carrying_the_metadata_address_is_refused_even_inside_an_allowed_network(settings):
    settings.AGENT_ALLOWED_HOSTS, settings.AGENT_ALLOWED_NETWORKS = [], ["::/0"]

    assert "link-local" in (outbound.refusal("x", ipaddress.ip_address("64:ff9b::a9fe:a9fe")) or "")
    assert "link-local" in (outbound.refusal("x", ipaddress.ip_address("::a9fe:a9fe")) or "")


def test_a_nat64_address_of_a_public_ipv4_one_is_judged_as_that_address(settings):
    """An IPv6-only network with DNS64 reaches public IPv4 agents this way: allowed like 8.8.8.8."""
    settings.AGENT_ALLOWED_HOSTS, settings.AGENT_ALLOWED_NETWORKS = ["agents.example.com"], []

    assert outbound.refusal("agents.example.com", ipaddress.ip_address("64:ff9b::808:808")) is None
    assert outbound.refusal("agents.example.com", ipaddress.ip_address("2620:4f:8000::1")) is None
    assert outbound.refusal("elsewhere.example", ipaddress.ip_address("64:ff9b::808:808")) is not None
