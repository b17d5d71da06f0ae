"""The Bot Framework protocol a Teams bot speaks, both ways, written on httpx and PyJWT.

Teams → Reviewer: every activity Teams sends to the bot's messaging endpoint (/teams/messages) carries
`Authorization: Bearer <JWT>` signed by the Bot Connector service. `verified_bot` checks it as the Bot
Framework's authentication rules say: an RS256 signature by a key published at the `jwks_uri` of the
Bot Framework's OpenID metadata (TEAMS_BOT_OPENID_METADATA_URL), that key endorsed for the activity's
channel (`msteams`) when it lists endorsements, `iss` https://api.botframework.com, `aud` the app id of
one of Reviewer's enabled bots, inside its validity (five minutes of clock skew), and its `serviceUrl`
claim equal to the activity's. Anything else is refused before the activity is read for meaning.

Reviewer → Teams: the worker posts a proposal's card to a channel's conversation and later updates that
same activity in place (the Bot Connector's REST API, `POST`/`PUT {serviceUrl}/v3/conversations/…`), with
a token it gets for the bot's app id and password (OAuth 2.0 client credentials at TEAMS_BOT_TOKEN_URL).
Every call goes through the outbound allow-list (approvals/a2a/outbound.py), https only unless
NOTIFY_ALLOW_HTTP.

Why not the SDK: Microsoft's maintained successor of the archived botbuilder, the Microsoft 365 Agents
SDK (`microsoft-agents-hosting-core`, `-activity`, `-authentication-msal`), is not among Reviewer's
dependencies; what Reviewer needs from it is the token check and two REST calls, written here against
the published protocol and tested against a loopback stand-in that signs as the connector does
(tests/notify/teams_bot_standin.py).
"""

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import jwt
from django.conf import settings

from approvals.models.notifications import TeamsBot
from approvals.notify.common import notify_timeout
from approvals.notify.secrets import read_secret
from lib import outbound

ISSUER = "https://api.botframework.com"
SCOPE = "https://api.botframework.com/.default"
CLOCK_SKEW_SECONDS = 300
KEYS_SECONDS = 3600  # the published keys are read again after an hour, or at once for an unknown kid


class BotRequestRefused(Exception):
    """A request to the messaging endpoint that is not from Teams for one of Reviewer's bots."""

    def __init__(self, code: str, bot: TeamsBot | None = None):
        super().__init__(code)
        self.code = code
        self.bot = bot


def https_refusal(url: str) -> str | None:
    """Why Reviewer will not call this Teams URL (None if it will): https only, as for webhooks."""
    scheme = urlsplit(url or "").scheme
    if scheme == "https" or (scheme == "http" and settings.NOTIFY_ALLOW_HTTP):
        return None
    return "a Teams URL is an https:// URL (http:// only with NOTIFY_ALLOW_HTTP, for development)"


async def _request(method: str, url: str, **options: Any) -> httpx.Response:
    if refusal := https_refusal(url):
        raise httpx.UnsupportedProtocol(refusal)
    async with outbound.async_client(timeout=notify_timeout(), follow_redirects=False) as client:
        return await client.request(method, url, **options)


def _call(method: str, url: str, **options: Any) -> httpx.Response:
    response = asyncio.run(_request(method, url, **options))
    if not 200 <= response.status_code < 300:
        raise httpx.HTTPStatusError(
            f"Teams answered {response.status_code}", request=response.request, response=response
        )
    return response


# --- the keys Teams signs with ---------------------------------------------------------------------


@dataclass
class _Keys:
    by_kid: dict[str, dict[str, Any]]
    read_at: float


_keys: dict[str, _Keys] = {}  # by metadata URL
_keys_lock = threading.Lock()


def _published_keys(refresh: bool = False) -> dict[str, dict[str, Any]]:
    url = settings.TEAMS_BOT_OPENID_METADATA_URL
    with _keys_lock:
        cached = _keys.get(url)
        if cached and not refresh and time.monotonic() - cached.read_at < KEYS_SECONDS:
            return cached.by_kid
    metadata = _call("GET", url).json()
    jwks = _call("GET", str(metadata["jwks_uri"])).json()
    by_kid = {str(key.get("kid")): key for key in jwks.get("keys", []) if key.get("kid")}
    with _keys_lock:
        _keys[url] = _Keys(by_kid, time.monotonic())
    return by_kid


def _key_for(kid: str) -> dict[str, Any] | None:
    key = _published_keys().get(kid)
    return key if key is not None else _published_keys(refresh=True).get(kid)


def verified_bot(authorization: str, activity: dict[str, Any]) -> TeamsBot:
    """The enabled bot this activity was sent to, once its token holds (see the module's docstring);
    raises BotRequestRefused otherwise."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise BotRequestRefused("no_token")
    try:
        header = jwt.get_unverified_header(token)
        audience = jwt.decode(token, options={"verify_signature": False}).get("aud")
    except jwt.PyJWTError:
        raise BotRequestRefused("bad_token") from None
    bot = TeamsBot.objects.filter(app_id=str(audience or ""), enabled=True).select_related("tenant").first()
    if bot is None:
        raise BotRequestRefused("unknown_bot")
    try:
        key = _key_for(str(header.get("kid") or ""))
    except (httpx.HTTPError, OSError, ValueError, KeyError):
        raise BotRequestRefused("keys_unavailable", bot) from None
    if key is None:
        raise BotRequestRefused("bad_signature", bot)
    channel = str(activity.get("channelId") or "")
    endorsements = key.get("endorsements")
    if endorsements is not None and channel not in endorsements:
        raise BotRequestRefused("key_not_endorsed", bot)
    try:
        claims = jwt.decode(
            token,
            jwt.PyJWK(key).key,
            algorithms=["RS256"],
            audience=bot.app_id,
            issuer=ISSUER,
            leeway=CLOCK_SKEW_SECONDS,
            options={"require": ["exp", "iss", "aud"]},
        )
    except jwt.PyJWTError:
        raise BotRequestRefused("bad_signature", bot) from None
    if claims.get("serviceUrl") != activity.get("serviceUrl"):
        raise BotRequestRefused("service_url_mismatch", bot)
    return bot


# --- the bot's own calls ---------------------------------------------------------------------------

_tokens: dict[str, tuple[str, float]] = {}  # app id -> (token, monotonic time it is renewed)
_tokens_lock = threading.Lock()


def _token(bot: TeamsBot) -> str:
    """The bot's connector token (client credentials), reused until five minutes before it ends."""
    with _tokens_lock:
        held = _tokens.get(bot.app_id)
        if held and held[1] > time.monotonic():
            return held[0]
    answer = _call(
        "POST",
        settings.TEAMS_BOT_TOKEN_URL,
        data={
            "grant_type": "client_credentials",
            "client_id": bot.app_id,
            "client_secret": read_secret(bot.app_password_ref),
            "scope": SCOPE,
        },
    ).json()
    token, lifetime = str(answer["access_token"]), int(answer.get("expires_in") or 3600)
    with _tokens_lock:
        _tokens[bot.app_id] = (token, time.monotonic() + max(lifetime - 300, 60))
    return token


def _activities_url(bot: TeamsBot, conversation_id: str) -> str:
    return f"{bot.service_url.rstrip('/')}/v3/conversations/{quote(conversation_id, safe='')}/activities"


def card_activity(adaptive_card: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "message",
        "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive", "content": adaptive_card}],
    }


def post_card(bot: TeamsBot, conversation_id: str, adaptive_card: dict[str, Any]) -> str:
    """Post a card to a conversation (a channel); returns the activity id the connector gave it."""
    response = _call(
        "POST",
        _activities_url(bot, conversation_id),
        json=card_activity(adaptive_card),
        headers={"Authorization": f"Bearer {_token(bot)}"},
    )
    return str(response.json().get("id") or "")


def update_card(bot: TeamsBot, conversation_id: str, activity_id: str, adaptive_card: dict[str, Any]) -> None:
    """Replace the card of an activity the bot posted: everyone in the channel sees the new one."""
    _call(
        "PUT",
        f"{_activities_url(bot, conversation_id)}/{quote(activity_id, safe='')}",
        json={**card_activity(adaptive_card), "id": activity_id},
        headers={"Authorization": f"Bearer {_token(bot)}"},
    )


def forget_cached() -> None:
    """Drop the cached keys and tokens (tests start each stand-in with new ones)."""
    with _keys_lock:
        _keys.clear()
    with _tokens_lock:
        _tokens.clear()
