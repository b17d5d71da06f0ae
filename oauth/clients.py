"""Who is calling a door: a registered agent, authenticated as an OAuth client (RFC 6749 §2.3.1).

`client_id` is the agent's slug and the client secret its API token (the one `register_agent` printed),
sent as HTTP Basic (`client_secret_basic`, form-urlencoded id and secret) or as the form fields
`client_id` and `client_secret` (`client_secret_post`). `Authorization: Bearer <API token>` is accepted
too, so an agent uses the same credential as on /api/v1/. One method per request; anything else is
`invalid_client`."""

import base64
import binascii
import hmac
from urllib.parse import unquote_plus

from django.http import HttpRequest

from approvals.agent_api.tokens import agent_for_token
from approvals.models import Agent
from oauth.errors import OAuthError


def _basic(header: str) -> tuple[str, str] | None:
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as error:
        raise OAuthError("invalid_client", "malformed Basic credentials", status=401) from error
    client_id, colon, secret = decoded.partition(":")
    if not colon:
        raise OAuthError("invalid_client", "malformed Basic credentials", status=401)
    return unquote_plus(client_id), unquote_plus(secret)


def authenticate_client(request: HttpRequest, form: dict[str, str]) -> Agent:
    """The agent calling, or OAuthError(invalid_client, 401)."""
    header = request.headers.get("Authorization", "")
    posted = "client_secret" in form
    agent: Agent | None
    if header.lower().startswith("bearer "):
        if posted:
            raise OAuthError("invalid_client", "use one client authentication method", status=401)
        agent = agent_for_token(header[7:].strip())
        claimed = form.get("client_id")
        if agent is not None and claimed and claimed != agent.slug:
            agent = None
    else:
        basic = _basic(header) if header else None
        if basic is not None and posted:
            raise OAuthError("invalid_client", "use one client authentication method", status=401)
        if basic is None and not posted:
            raise OAuthError("invalid_client", "client authentication is required", status=401)
        client_id, secret = basic if basic is not None else (form.get("client_id", ""), form["client_secret"])
        if basic is not None and form.get("client_id") not in (None, client_id):
            raise OAuthError("invalid_client", "client_id differs from the authenticated client", status=401)
        agent = agent_for_token(secret) if secret else None
        # The slug is compared in constant time too: which half was wrong is not the caller's to learn.
        if agent is not None and not hmac.compare_digest(agent.slug.encode(), client_id.encode()):
            agent = None
    if agent is None:
        raise OAuthError("invalid_client", "unknown client or wrong secret", status=401)
    return agent
