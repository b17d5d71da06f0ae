"""Who the client is and whether it used https, believed only from the operator's proxies.

A proxy in front of Daphne says both in headers (`X-Forwarded-For`, `X-Forwarded-Proto`). Anyone who
reaches Daphne directly can send the same headers, so they are read only when the connection's peer is
inside TRUSTED_PROXIES (settings; CIDRs, default none). From every other peer they are removed before
Django or Channels see them, so neither SECURE_PROXY_SSL_HEADER nor anything else can honour them.

From a trusted proxy, the scope's client becomes the right-most `X-Forwarded-For` address that is not
itself a trusted proxy (a client can prepend anything it likes; only what the proxies appended is
believed), and the scope's scheme follows `X-Forwarded-Proto`. REMOTE_ADDR, which sign-in throttling
counts under and the audit trail records, is that client. Daphne runs without --proxy-headers: it
would take the headers from any peer.

A proxy left out of TRUSTED_PROXIES is the likely mistake of a first deployment: every request then
looks like plain http, and with SECURE_SSL_REDIRECT each page would redirect to itself for ever. So an
http request that an untrusted peer marks `X-Forwarded-Proto: https` while that redirect is on gets a
503 saying what to set (the details, with the peer's address, go to the log, once per peer and
process). Someone reaching Daphne directly with forged headers gets that page instead of a redirect:
nothing more.
"""

import ipaddress
import logging

from django.conf import settings

log = logging.getLogger(__name__)

UNTRUSTED_PROXY_PAGE = (
    b"Reviewer is behind a proxy it has not been told to trust, so it cannot tell that this request came"
    b" over https and would redirect it to itself for ever. The operator must set TRUSTED_PROXIES to the"
    b" proxy's address (docs/operations.md, 'Behind a TLS proxy'). The server log names the address.\n"
)

FORWARDING_HEADERS = frozenset(
    {b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host", b"x-forwarded-port", b"forwarded"}
)
SCHEMES = {"http": {"http": "http", "https": "https"}, "websocket": {"http": "ws", "https": "wss"}}


def networks(values) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """TRUSTED_PROXIES as networks; ValueError naming the entry that is not one."""
    parsed = []
    for value in values:
        try:
            parsed.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ValueError(f"TRUSTED_PROXIES: {value!r} is not an IP address or network") from None
    return parsed


def _address(text: str):
    try:
        address = ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def _trusted(address, trusted) -> bool:
    return address is not None and any(
        address.version == network.version and address in network for network in trusted
    )


def _forwarded_proto(headers) -> str:
    """The scheme X-Forwarded-Proto names: its last value, the one the nearest proxy set ("" if none)."""
    values = [value.decode("latin-1") for name, value in headers if name.lower() == b"x-forwarded-proto"]
    return (values or [""])[-1].split(",")[-1].strip().lower()


def forwarded_scope(scope: dict, trusted) -> dict:
    """The scope as Django and Channels should see it (see the module docstring)."""
    headers = list(scope.get("headers") or [])
    kept = [(name, value) for name, value in headers if name.lower() not in FORWARDING_HEADERS]
    peer = _address((scope.get("client") or ("",))[0] or "")
    if not _trusted(peer, trusted):
        return {**scope, "headers": kept}
    client = peer
    hops = [
        hop
        for name, value in headers
        if name.lower() == b"x-forwarded-for"
        for hop in value.decode("latin-1").split(",")
    ]
    for hop in reversed(hops):
        address = _address(hop)
        if address is None:
            break  # what is left of an unreadable hop is the client's own text: never believed
        client = address
        if not _trusted(address, trusted):
            break
    changed = {**scope, "client": (str(client), 0)}
    proto = _forwarded_proto(headers)
    scheme = SCHEMES.get(scope["type"], {}).get(proto)
    if scheme:
        changed["scheme"] = scheme
        # Django reads it (SECURE_PROXY_SSL_HEADER) as the proxy's one value, not a list a client began.
        kept.append((b"x-forwarded-proto", proto.encode()))
    changed["headers"] = kept
    return changed


class TrustedProxies:
    """ASGI middleware for the "http" and "websocket" scopes, outermost in reviewer/asgi.py."""

    def __init__(self, app, trusted=None):
        self.app = app
        self.trusted = networks(settings.TRUSTED_PROXIES if trusted is None else trusted)

        self._peers_logged: set[str] = set()

    async def __call__(self, scope, receive, send):
        if scope["type"] in SCHEMES:
            if scope["type"] == "http" and self._untrusted_proxy_would_loop(scope):
                await _send_untrusted_proxy_page(send)
                return
            scope = forwarded_scope(scope, self.trusted)
        await self.app(scope, receive, send)

    def _untrusted_proxy_would_loop(self, scope: dict) -> bool:
        """An http request from a peer outside TRUSTED_PROXIES that says it came over https, while
        http is redirected to https (see the module docstring)."""
        if not settings.SECURE_SSL_REDIRECT or scope.get("scheme") != "http":
            return False
        peer = (scope.get("client") or ("",))[0] or ""
        if _trusted(_address(peer), self.trusted):
            return False
        said_https = _forwarded_proto(scope.get("headers") or []) == "https"
        if said_https and peer not in self._peers_logged:
            self._peers_logged.add(peer)
            log.warning(
                "X-Forwarded-Proto: https from %s, which is not in TRUSTED_PROXIES: answering 503 instead"
                " of redirecting to https in a loop. If %s is your TLS proxy, set TRUSTED_PROXIES=%s/32.",
                peer,
                peer,
                peer,
            )
        return said_https


async def _send_untrusted_proxy_page(send) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"cache-control", b"no-store")]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": UNTRUSTED_PROXY_PAGE})
