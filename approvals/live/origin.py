"""The WebSocket origin check: a socket is opened only from a page of this Reviewer.

Channels' AllowedHostsOriginValidator compares only the Origin's host with ALLOWED_HOSTS, so a page at
http://127.0.0.1:9999 or https://127.0.0.1 could open a reviewer's socket on http://127.0.0.1:8000 with
the reviewer's cookies. Here the whole origin (scheme, host and port) must be one of:
- the socket's own origin (its Host header, with a host in ALLOWED_HOSTS, and the scheme the connection
  arrived with, https when SECURE_PROXY_SSL_HEADER says a proxy terminated TLS),
- REVIEWER_ISSUER, the public base URL,
- any of CSRF_TRUSTED_ORIGINS (the same list Django's CSRF check trusts for forms).
Anything else, or no Origin at all, is refused before the consumer runs.
"""

from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

DEFAULT_PORTS = {"http": 80, "https": 443}


def normalized_origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) with the default port filled in, or None for anything that is not one."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.path not in {"", "/"}:
        return None
    return parts.scheme, parts.hostname.lower(), port or DEFAULT_PORTS[parts.scheme]


def _header(scope, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


def own_origin(scope) -> tuple[str, str, int] | None:
    """The origin of the page that should be opening this socket: its Host, as Django would accept it."""
    host = _header(scope, b"host")
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    scheme = "https" if scope.get("scheme") == "wss" else "http"
    proxy_header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy_header:
        name, secure_value = proxy_header
        header_name = name.removeprefix("HTTP_").replace("_", "-").lower().encode()
        if _header(scope, header_name).split(",")[0].strip() == secure_value:
            scheme = "https"
    return normalized_origin(f"{scheme}://{host}")


def trusted_origins() -> set[tuple[str, str, int]]:
    candidates = [settings.REVIEWER_ISSUER, *settings.CSRF_TRUSTED_ORIGINS]
    return {origin for origin in map(normalized_origin, candidates) if origin is not None}


def origin_allowed(scope) -> bool:
    origin = normalized_origin(_header(scope, b"origin"))
    if origin is None:
        return False
    return origin == own_origin(scope) or origin in trusted_origins()


class SameOriginValidator:
    """ASGI middleware for the websocket router: refuse the handshake unless origin_allowed()."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and not origin_allowed(scope):
            denier = WebsocketDenier()
            return await denier(scope, receive, send)
        return await self.application(scope, receive, send)
