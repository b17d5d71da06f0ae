"""A URL as the audit trail may keep it: its shape without the credentials it may carry.

Admins paste URLs that authenticate themselves (`https://user:password@hooks.example/`, a receiver's
`?token=...`, a signed link's fragment). The trail is kept for years and exported to third parties, so
an event records the scheme, host, port and path, the names of the query's parameters, and the marker
`REDACTED` where a user, password, parameter value or fragment was. The configuration row itself keeps
the full URL (delivery needs it).
"""

from urllib.parse import urlsplit, urlunsplit

REDACTED = "REDACTED"


def without_credentials(url: str) -> str:
    """`url` with its user information, query values and fragment replaced by REDACTED; text that does
    not parse as a URL is replaced whole."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return REDACTED
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal, bracketed again
    netloc = host if port is None else f"{host}:{port}"
    if parts.username is not None or parts.password is not None:
        netloc = f"{REDACTED}@{netloc}"
    # A parameter keeps its name; a piece without "=" may be a bare token, and goes whole.
    query = "&".join(
        f"{piece.partition('=')[0]}={REDACTED}" if "=" in piece else REDACTED
        for piece in parts.query.split("&")
        if piece
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, REDACTED if parts.fragment else ""))
