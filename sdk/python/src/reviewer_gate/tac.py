"""The agent's side of the OAuth Transaction Authorization Challenge (draft-rosomakho-oauth-txn-challenge-00).

A protected resource answers a request that needs people's approval with `401` and a challenge it
signed. `TransactionAuthorization` is an `httpx.Auth` that handles that for any httpx client, sync or
async, so a Python agent needs one line:

    auth = TransactionAuthorization(REVIEWER_URL, client_id="refund-bot", client_secret=API_TOKEN)
    httpx.post("https://refunds.example.com/refunds", json={...}, auth=auth)

On every request it sends `Accept-Txn-Challenge: ?1` (the draft's §4.1: the agent can relay). When the
answer is a `401` whose `WWW-Authenticate` carries `error="transaction_authorization_required"` and a
`transaction_challenge`, it

1. checks the challenge is meant for this Reviewer (`aud`) and not expired (the signature is
   Reviewer's to check: the agent does not hold the resource's keys);
2. relays it **unchanged** to Reviewer's transaction authorization endpoint, authenticated as the
   agent's own registration (`client_id` = its slug, the secret = its API token, HTTP Basic);
3. polls with the `transaction_authorization_id`, waiting `interval` seconds between polls (5 more
   after each `slow_down`, double after a connection failure), until a token, a refusal, the
   transaction's `expires_in` or `max_wait`;
4. retries the original request once with `Authorization: Bearer <access token>`.

A denial, an expiry or a refused challenge raises `TransactionAuthorizationError` (`error`, the OAuth
error code; `description`); the original request is not retried. Any other response passes through
untouched. The retried request's answer is returned as it is: the resource decides whether the token
releases this exact operation.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus

import httpx
import jwt

ENDPOINT_PATH = "/oauth/txn-authorization"
ACCEPT_HEADER = "Accept-Txn-Challenge"
REQUIRED = "transaction_authorization_required"
DEFAULT_INTERVAL = 5.0
SLOW_DOWN_STEP = 5.0
LEEWAY_SECONDS = 30

# One auth-param of a WWW-Authenticate value: name=token or name="quoted string" (RFC 9110 §11.2).
AUTH_PARAM = re.compile(r'([A-Za-z0-9_!#$%&\'*+.^`|~-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,"]+))')


class TransactionAuthorizationError(Exception):
    """Reviewer (or this client) refused: `error` is the OAuth error code (`access_denied`,
    `expired_token`, `invalid_grant`, `invalid_client`, ...), `description` says why."""

    def __init__(self, error: str, description: str = "") -> None:
        super().__init__(f"{error}: {description}" if description else error)
        self.error = error
        self.description = description


def challenge_of(response: httpx.Response) -> str | None:
    """The transaction challenge a resource's answer carries, or None when it carries none."""
    if response.status_code != 401:
        return None
    for value in response.headers.get_list("www-authenticate"):
        params = {
            match.group(1).lower(): (match.group(2) if match.group(2) is not None else match.group(3))
            for match in AUTH_PARAM.finditer(value)
        }
        if params.get("error") == REQUIRED and params.get("transaction_challenge"):
            return params["transaction_challenge"].replace('\\"', '"')
    return None


@dataclass
class _Poll:
    transaction_id: str
    interval: float
    deadline: float


class TransactionAuthorization(httpx.Auth):
    """An `httpx.Auth` that meets a transaction authorization challenge with Reviewer's approval.

    `reviewer_url`: Reviewer's base URL (its issuer, the challenge's `aud`, unless `issuer` says
    otherwise). `max_wait`: seconds to wait for people at most (15 minutes by default). `verify`,
    `transport`: for the connection to Reviewer (a CA bundle path, or a test transport)."""

    requires_request_body = True  # the original request is sent again with the token

    def __init__(
        self,
        reviewer_url: str,
        *,
        client_id: str,
        client_secret: str,
        issuer: str | None = None,
        max_wait: float = 900.0,
        verify: Any = True,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        async_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.endpoint = reviewer_url.rstrip("/") + ENDPOINT_PATH
        self.issuer = (issuer or reviewer_url).rstrip("/")
        # RFC 6749 §2.3.1: the id and the secret are form-urlencoded before they are joined.
        self._basic = httpx.BasicAuth(quote_plus(client_id), quote_plus(client_secret))
        self.max_wait = max_wait
        self._verify = verify
        self._transport = transport
        self._async_transport = async_transport
        self._sleep = sleep
        self._async_sleep = async_sleep

    # -----------------------------------------------------------------------------------------------
    # httpx's hooks

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers[ACCEPT_HEADER] = "?1"
        response = yield request
        challenge = challenge_of(response)
        if challenge is None:
            return
        response.read()
        request.headers["Authorization"] = f"Bearer {self.authorize(challenge)}"
        yield request

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        request.headers[ACCEPT_HEADER] = "?1"
        response = yield request
        challenge = challenge_of(response)
        if challenge is None:
            return
        await response.aread()
        request.headers["Authorization"] = f"Bearer {await self.aauthorize(challenge)}"
        yield request

    # -----------------------------------------------------------------------------------------------
    # Relay and poll

    def authorize(self, challenge: str) -> str:
        """Relay the challenge and wait for the access token (blocking)."""
        self._check(challenge)
        with httpx.Client(verify=self._verify, transport=self._transport, timeout=30.0) as reviewer:
            answer = self._answer(self._post(reviewer, {"transaction_challenge": challenge}))
            if "access_token" in answer:
                return str(answer["access_token"])
            poll = self._poll_of(answer)
            while True:
                self._sleep(self._wait(poll))
                try:
                    response = self._post(reviewer, {"transaction_authorization_id": poll.transaction_id})
                except httpx.TransportError:
                    poll.interval *= 2  # the draft's §5.3: back off after a connection failure
                    continue
                token = self._step(poll, response)
                if token is not None:
                    return token

    async def aauthorize(self, challenge: str) -> str:
        """Relay the challenge and wait for the access token, without holding a thread between polls."""
        self._check(challenge)
        async with httpx.AsyncClient(
            verify=self._verify, transport=self._async_transport, timeout=30.0
        ) as reviewer:
            answer = self._answer(await self._apost(reviewer, {"transaction_challenge": challenge}))
            if "access_token" in answer:
                return str(answer["access_token"])
            poll = self._poll_of(answer)
            while True:
                await self._async_sleep(self._wait(poll))
                try:
                    response = await self._apost(
                        reviewer, {"transaction_authorization_id": poll.transaction_id}
                    )
                except httpx.TransportError:
                    poll.interval *= 2
                    continue
                token = self._step(poll, response)
                if token is not None:
                    return token

    def _post(self, reviewer: httpx.Client, form: dict[str, str]) -> httpx.Response:
        return reviewer.post(self.endpoint, data=form, auth=self._basic)

    async def _apost(self, reviewer: httpx.AsyncClient, form: dict[str, str]) -> httpx.Response:
        return await reviewer.post(self.endpoint, data=form, auth=self._basic)

    def _check(self, challenge: str) -> None:
        """The draft's §4.5, as far as an agent without the resource's keys can: the challenge is for
        this Reviewer and still alive. Reviewer verifies the signature."""
        try:
            claims = jwt.decode(challenge, options={"verify_signature": False})
        except jwt.PyJWTError as error:
            raise TransactionAuthorizationError("invalid_request", "the challenge is not a JWT") from error
        audience = claims.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if self.issuer not in audiences:
            raise TransactionAuthorizationError(
                "invalid_request", f"the challenge is for {audience!r}, not for {self.issuer}"
            )
        expires = claims.get("exp")
        if not isinstance(expires, int) or expires + LEEWAY_SECONDS < time.time():
            raise TransactionAuthorizationError("expired_token", "the challenge has expired")

    @staticmethod
    def _answer(response: httpx.Response) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise TransactionAuthorizationError("server_error", f"Reviewer answered {response.status_code}")
        if response.status_code != 200:
            raise TransactionAuthorizationError(
                str(body.get("error", "server_error")), str(body.get("error_description", ""))
            )
        return body

    def _poll_of(self, answer: dict[str, Any]) -> _Poll:
        transaction_id = answer.get("transaction_authorization_id")
        if not isinstance(transaction_id, str):
            raise TransactionAuthorizationError("server_error", "no transaction_authorization_id")
        interval = answer.get("interval", DEFAULT_INTERVAL)
        expires_in = answer.get("expires_in", self.max_wait)
        waits = min(
            self.max_wait, float(expires_in) if isinstance(expires_in, int | float) else self.max_wait
        )
        return _Poll(
            transaction_id=transaction_id,
            interval=float(interval) if isinstance(interval, int | float) else DEFAULT_INTERVAL,
            deadline=time.monotonic() + waits,
        )

    @staticmethod
    def _wait(poll: _Poll) -> float:
        if time.monotonic() + poll.interval > poll.deadline:
            raise TransactionAuthorizationError("expired_token", "no decision within the time allowed")
        return poll.interval

    def _step(self, poll: _Poll, response: httpx.Response) -> str | None:
        """The token, or None to poll again (pending, slow_down); raises for a refusal."""
        try:
            return str(self._answer(response)["access_token"])
        except TransactionAuthorizationError as refusal:
            if refusal.error == "authorization_pending":
                return None
            if refusal.error == "slow_down":
                poll.interval += SLOW_DOWN_STEP
                return None
            raise
        except KeyError as error:
            raise TransactionAuthorizationError("server_error", "a 200 without an access_token") from error
