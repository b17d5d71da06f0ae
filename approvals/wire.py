"""What every agent-facing endpoint answers the same way: the error body and the body-size limit.

The REST API (api.py), the A2A push webhook (a2a_views.py), the push parser (a2a.py) and the WebSocket
consumers all build their refusals with `error_body`, so an agent or a page sees one shape:
`{"error": {"code": ..., "message": ..., "field": ...}}`, with `field` the dotted path of the input at
fault (or None). Nothing here imports Django models or the services, so any layer may use it.
"""

from django.conf import settings


def error_body(code: str, message: str, field: str | None = None) -> dict:
    return {"error": {"code": code, "message": message, "field": field}}


def intake_limit() -> int:
    """The largest body an agent may send: the action and consequences cap, with room for the rest."""
    return settings.PROPOSAL_MAX_BYTES * 2


def body_too_large(request) -> bool:
    """True when the body is over intake_limit(): first by its declared length, before reading it."""
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if declared.isdigit() and int(declared) > intake_limit():
        return True
    return len(request.body) > intake_limit()


def too_large_message() -> str:
    return f"the body is larger than {intake_limit()} bytes"
