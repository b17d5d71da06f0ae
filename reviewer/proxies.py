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
"""

import ipaddress

from django.conf import settings

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


def forwarded_scope(scope: dict, trusted) -> dict:
    """The scope as Django and Channels should see it (see the module docstring)."""
    headers = list(scope.get("headers") or [])
    kept = [(name, value) for name, value in headers if name.lower() not in FORWARDING_HEADERS]
    peer = _address((scope.get("client") or ("",))[0] or "")
    if not _trusted(peer, trusted):
        return {**scope, "headers": kept}
    values: dict[bytes, list[str]] = {}
    for name, value in headers:
        if name.lower() in FORWARDING_HEADERS:
            values.setdefault(name.lower(), []).append(value.decode("latin-1"))
    client = peer
    hops = [hop for value in values.get(b"x-forwarded-for", []) for hop in value.split(",")]
    for hop in reversed(hops):
        address = _address(hop)
        if address is None:
            break  # what is left of an unreadable hop is the client's own text: never believed
        client = address
        if not _trusted(address, trusted):
            break
    changed = {**scope, "client": (str(client), 0)}
    proto = (values.get(b"x-forwarded-proto") or [""])[-1].split(",")[-1].strip().lower()
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

    async def __call__(self, scope, receive, send):
        if scope["type"] in SCHEMES:
            scope = forwarded_scope(scope, self.trusted)
        await self.app(scope, receive, send)
