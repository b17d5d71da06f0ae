"""Reading a door's body: `application/x-www-form-urlencoded` (RFC 6749 §3.2), each parameter at most
once; or, for the token endpoint's Auth0-style clients (auth0-python sends JSON there), a flat JSON
object of strings. Bodies over the agents' intake limit, and hostile JSON (NaN, huge integers, NUL,
deep nesting), are `invalid_request` before any lookup. `json_parameter` reads a parameter that is
itself JSON (RAR's `authorization_details`) with the same safe parser."""

from typing import Any

from django.http import HttpRequest

from approvals.agent_api.wire import body_too_large, load_json, too_large_message
from lib.errors import ServiceError
from oauth.errors import OAuthError

FORM = "application/x-www-form-urlencoded"
JSON = "application/json"


def form_of(request: HttpRequest, *, json_allowed: bool = False) -> dict[str, str]:
    if body_too_large(request):
        raise OAuthError("invalid_request", too_large_message(), status=413)
    if json_allowed and request.content_type == JSON:
        body = json_parameter(request.body, "the body")
        if not isinstance(body, dict) or not all(isinstance(value, str) for value in body.values()):
            raise OAuthError("invalid_request", "a JSON body is an object of string parameters")
        return body
    if request.content_type != FORM:
        raise OAuthError("invalid_request", f"the body must be {FORM}")
    form: dict[str, str] = {}
    for name, values in request.POST.lists():
        if len(values) != 1:
            raise OAuthError("invalid_request", f"the parameter {name[:50]!r} is repeated")
        form[name] = values[0]
    return form


def json_parameter(raw: bytes | str, name: str, *, error: str = "invalid_request") -> Any:
    try:
        return load_json(raw)
    except ServiceError as refusal:
        raise OAuthError(error, f"{name} is not acceptable JSON: {refusal.message}") from refusal
    except ValueError as refusal:  # not JSON at all
        raise OAuthError(error, f"{name} is not JSON") from refusal
