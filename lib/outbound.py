"""Which hosts Reviewer may call (server-side request forgery through a URL an admin or agent gave).

Every outbound request to an agent (its card, its A2A interface), a tenant's webhook or a Teams channel
goes through `GuardedTransport`, an httpx transport that resolves the host itself, checks every address
it resolves to, and then connects to the checked address (so a second DNS answer cannot swap in another
one). Because the check sits in
the transport, it runs again for every request an httpx client makes, redirects included.

The rule (settings `AGENT_ALLOWED_HOSTS`, `AGENT_ALLOWED_NETWORKS`, documented in reviewer/settings.py):

- link-local (169.254.0.0/16, fe80::/10, which holds the cloud metadata service), unspecified,
  multicast and the other metadata addresses are never called;
- an address inside an allowed network is called (the only way to reach private or loopback ones);
- an IPv6 address that carries an IPv4 one to a translator (IPv4-mapped ::ffff:a.b.c.d,
  IPv4-compatible ::a.b.c.d, NAT64 64:ff9b::a.b.c.d) is judged as that IPv4 address, so
  64:ff9b::127.0.0.1 is loopback; the tunnels and translators whose IPv4 end cannot be judged here
  (6to4 2002::/16, Teredo 2001::/32, local-use NAT64 64:ff9b:1::/48), documentation, unique-local and
  site-local ranges are never public: only an allowed network reaches them;
- otherwise the host name must be allowed and the address public (globally routable);
- a name is allowed only if every address it resolves to is.

Refusals raise `HostNotAllowed`; callers store a generic text and log the detail (what a refused or
failed connection said is a port scanner's answer, and must not reach the outbox or evidence).

A URL stored now and called later (a webhook endpoint) is judged when it is registered too, by the same
rule (`url_refusal`): what delivery would refuse is refused there, with the reason, instead of failing
every delivery afterwards. Delivery still checks every request, since the name may resolve elsewhere by
then. The rule lives here, below every app, so registration (a service) and delivery (the worker's
senders, the A2A client) import the one copy.
"""

import asyncio
import ipaddress
import socket
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Metadata services outside link-local space (Alibaba Cloud; AWS over IPv6).
NEVER = [ipaddress.ip_network("100.100.100.200/32"), ipaddress.ip_network("fd00:ec2::254/128")]

# IPv6 ranges that hold an IPv4 address in their last 32 bits, which a translator or the kernel reaches.
CARRIES_IPV4 = [ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("::/96")]

# IPv6 ranges that are not public whatever this Python's ipaddress tables say (they differ by version:
# 3.11 calls 6to4, NAT64 and 3fff::/20 global). 6to4 and Teredo tunnel to an IPv4 address that is not
# checked here; 64:ff9b:1::/48 is a translator's local prefix with no fixed place for the IPv4 address.
NOT_PUBLIC_IPV6 = [
    ipaddress.ip_network(network)
    for network in (
        "2002::/16",  # 6to4
        "2001::/32",  # Teredo
        "64:ff9b:1::/48",  # NAT64, local use
        "2001:db8::/32",  # documentation
        "3fff::/20",  # documentation
        "fc00::/7",  # unique local
        "fec0::/10",  # site-local (deprecated)
        "100::/64",  # discard-only
    )
]


class HostNotAllowed(httpx.ConnectError):
    """An agent URL whose host the operator did not allow. An httpx transport error, so every caller
    that handles a failed connection handles this one too (and never retries it into success)."""


def _address(text: str) -> IPAddress:
    address = ipaddress.ip_address(text.split("%", 1)[0])  # drop an IPv6 zone ("fe80::1%eth0")
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    return address


def carried_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv4-compatible or NAT64 address stands for (:: and ::1 are neither)."""
    if not isinstance(address, ipaddress.IPv6Address) or int(address) <= 1:
        return None
    if any(address in network for network in CARRIES_IPV4):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _host_allowed(host: str) -> bool:
    host = host.lower().rstrip(".")
    for allowed in settings.AGENT_ALLOWED_HOSTS:
        allowed = allowed.lower().rstrip(".")
        if host == allowed or (allowed.startswith(".") and host.endswith(allowed)):
            return True
    return False


def refusal(host: str, address: IPAddress) -> str | None:
    """Why `address` (one address `host` resolved to) may not be called, or None if it may."""
    ipv4 = carried_ipv4(address)
    if ipv4 is not None:
        why = refusal(host, ipv4)
        return f"{why} (carried in {address})" if why else None
    if address.is_link_local or address.is_unspecified or address.is_multicast:
        return "link-local, unspecified or multicast address"
    if any(address in network for network in NEVER):
        return "a cloud metadata address"
    networks = [ipaddress.ip_network(n, strict=False) for n in settings.AGENT_ALLOWED_NETWORKS]
    if any(address.version == network.version and address in network for network in networks):
        return None
    if any(address in network for network in NOT_PUBLIC_IPV6):
        return "an IPv6 tunnel, translator, documentation or local address outside AGENT_ALLOWED_NETWORKS"
    if not _host_allowed(host):
        return "neither the host is in AGENT_ALLOWED_HOSTS nor the address in AGENT_ALLOWED_NETWORKS"
    if not address.is_global:
        return "a private or loopback address outside AGENT_ALLOWED_NETWORKS"
    return None


def _first_refusal(host: str, answers: list[tuple[Any, ...]]) -> tuple[list[IPAddress], str | None]:
    """The distinct addresses of getaddrinfo's `answers`, and why the first refused one is refused."""
    addresses = list(dict.fromkeys(_address(answer[4][0]) for answer in answers))
    for address in addresses:
        why = refusal(host, address)
        if why:
            return addresses, f"{host} resolves to {address}: {why}"
    return addresses, None


async def allowed_addresses(host: str, port: int) -> list[str]:
    """Resolve `host` and return the addresses to connect to; HostNotAllowed unless every one is allowed."""
    try:
        answers = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as error:
        raise httpx.ConnectError(f"cannot resolve {host}: {error}") from error
    addresses, why = _first_refusal(host, answers)
    if why:
        raise HostNotAllowed(why)
    return [str(address) for address in addresses]


def url_refusal(url: str) -> str | None:
    """Why the transport would refuse to call `url` if it were called now, or None: for a URL that is
    stored to be called later (a webhook endpoint), checked when it is registered. Resolves the host
    (blocking). A name that does not resolve yet is accepted only if AGENT_ALLOWED_HOSTS names it: no
    address of it can be judged, and an allowed name is the operator's word for it."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return f"{parts.scheme or 'scheme-less'} URLs are not called"
    host = parts.hostname
    if not host:
        return "the URL names no host"
    try:
        port = parts.port or {"http": 80, "https": 443}[parts.scheme]
    except ValueError:
        return "the URL's port is not a number from 0 to 65535"
    try:
        literal = _address(host)
    except ValueError:
        literal = None  # a name, not an address
    if literal is not None:
        why = refusal(host, literal)
        return f"{literal}: {why}" if why else None
    try:
        answers = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        if _host_allowed(host):
            return None
        return f"{host} does not resolve, and is not in AGENT_ALLOWED_HOSTS"
    return _first_refusal(host, answers)[1]


class GuardedTransport(httpx.AsyncHTTPTransport):
    """An httpx transport that connects only to allowed addresses (see the module docstring)."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        port = request.url.port or {"http": 80, "https": 443}.get(request.url.scheme)
        if request.url.scheme not in ("http", "https") or port is None:
            raise HostNotAllowed(f"{request.url.scheme} URLs are not called")
        original = request.url
        request.extensions = {**request.extensions, "sni_hostname": host}
        failure: httpx.ConnectError | None = None
        # Connect to a checked address (in resolver order, the next one if it refuses, as a client
        # trying "localhost" on ::1 and then 127.0.0.1 would). The Host header (set when the request was
        # built) and the TLS server name stay the original host: virtual hosts and certificates work.
        for address in await allowed_addresses(host, port):
            request.url = original.copy_with(host=address)
            try:
                return await super().handle_async_request(request)
            except httpx.ConnectError as error:
                failure = error
        raise failure or httpx.ConnectError(f"{host} resolves to no address")


def async_client(*, verify: Any = True, **options: Any) -> httpx.AsyncClient:
    """An httpx.AsyncClient whose every request (redirects included) passes the allow-list. `verify`
    (True, or a shared ssl.SSLContext) goes to the transport, which is what makes the TLS connections."""
    return httpx.AsyncClient(transport=GuardedTransport(verify=verify), **options)


def not_allowed(error: BaseException | None) -> bool:
    """True if `error`, or anything that caused it, is a HostNotAllowed refusal (the a2a SDK wraps
    transport errors in its own)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, HostNotAllowed):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False
