"""An enforcement proxy for an API that cannot be changed (any language): the resource guard in front of it.

    python -m reviewer_gate.proxy --upstream http://127.0.0.1:9000 --routes routes.toml [--host --port | --fd]

The upstream sees only requests the guard released, exactly as they were approved: the same method,
path, query and body bytes (the `txn` and the 202 mode's request id bind the body's SHA-256), with the
transaction token removed (it is addressed to this proxy, not to the upstream). Requests to routes the
file does not list are refused (403) unless `forward_unlisted = true`.

routes.toml (read with tomllib; relative paths are relative to the file):

    [resource]
    audience = "https://payments.example"   # this proxy's public URL: its registration's audience
    key_file = "resource-key.pem"            # Ed25519 private key (PKCS#8 PEM); made, mode 0600, if missing
    intake = true                            # the 202 mode for callers that send no Accept-Txn-Challenge
    retry_after_seconds = 5                  # the 202's Retry-After
    challenge_seconds = 300                  # a challenge's lifetime
    forward_unlisted = false

    [reviewer]
    url = "https://reviewer.example"
    api_token_env = "REVIEWER_GATE_API_TOKEN"  # the environment variable holding the registration's token
    # issuer = "...", tenant = "acme", agent = "payments-api"

    [caller]                                 # who is calling: an API key header mapped to principals...
    header = "X-Api-Key"
    keys = { "key-of-carol" = "carol" }
    # ... or trusted = true: the header's value is the principal, set by a gateway in front

    [[route]]
    method = "POST"
    path = "/refunds/{order_id}"
    type = "refund"                          # the RAR authorization detail's type
    tool = "payments.refund"                 # the tool Reviewer's policies name (default: the type)
    target = "https://payments.example/orders/{order_id}"
    fields = { order_id = "path.order_id", amount = "body.amount", currency = "body.currency" }

A field's source is `path.<parameter>`, `query.<name>` or `body.<dotted.path>` (the body as JSON; a
number keeps its literal text, so `40.00` becomes "40.00"). A missing field is a 400; nothing is sent.
"""

from __future__ import annotations

import argparse
import json
import os
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx

from reviewer_gate.resource.answers import Answer, refusal
from reviewer_gate.resource.asgi import (
    ASGIApp,
    Receive,
    ReviewerGateMiddleware,
    Scope,
    Send,
    read_body,
    send_answer,
)
from reviewer_gate.resource.callers import CallerOf, api_key_caller, trusted_header_caller
from reviewer_gate.resource.challenge import ResourceKey
from reviewer_gate.resource.guard import ResourceGuard
from reviewer_gate.resource.routes import OperationError, ProtectedRequest, Route, check_details

# Headers that belong to one connection, never forwarded (RFC 9110 section 7.6.1), and what httpx sets.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


class ConfigError(ValueError):
    """routes.toml is not usable; the proxy does not start."""


def _field_value(request: ProtectedRequest, source: str, body: Callable[[], Any]) -> Any:
    kind, _, name = source.partition(".")
    if kind == "path":
        value: Any = request.path_params.get(name)
    elif kind == "query":
        values = parse_qs(request.query).get(name)
        value = values[0] if values else None
    elif kind == "body":
        value = body()
        for part in name.split("."):
            value = value.get(part) if isinstance(value, dict) else None
    else:
        raise OperationError(f"unknown field source {source!r}")
    if value is None:
        raise OperationError(f"the request has no {source}")
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def describe_from_table(table: dict[str, Any]) -> Callable[[ProtectedRequest], list[dict[str, Any]]]:
    """A route's description built from its TOML table (type, target, actions, fields)."""
    type_ = table["type"]
    target_template = str(table.get("target") or table["path"])
    actions = table.get("actions")
    fields: dict[str, str] = dict(table.get("fields") or {})

    def describe(request: ProtectedRequest) -> list[dict[str, Any]]:
        parsed: list[Any] = []

        def body() -> Any:
            if not parsed:
                try:  # numbers keep their literal text: "40.00" stays "40.00"
                    parsed.append(json.loads(request.body or b"null", parse_float=str, parse_int=str))
                except ValueError as error:
                    raise OperationError(f"the body is not JSON: {error}") from error
            return parsed[0]

        detail: dict[str, Any] = {"type": type_, "locations": [target_template.format(**request.path_params)]}
        if actions:
            detail["actions"] = list(actions)
        for name, source in fields.items():
            detail[name] = _field_value(request, source, body)
        return check_details([detail])

    return describe


def routes_from_config(config: dict[str, Any]) -> list[Route]:
    routes = []
    for index, table in enumerate(config.get("route") or []):
        for required in ("method", "path", "type"):
            if not isinstance(table.get(required), str) or not table[required]:
                raise ConfigError(f"route {index + 1} needs {required} (a string)")
        routes.append(
            Route(
                method=table["method"],
                path=table["path"],
                describe=describe_from_table(table),
                tool=table.get("tool"),
            )
        )
    if not routes:
        raise ConfigError("routes.toml lists no [[route]]: the proxy would protect nothing")
    return routes


def caller_from_config(table: dict[str, Any]) -> CallerOf | None:
    header = table.get("header")
    if not header:
        return None
    if table.get("trusted"):
        return trusted_header_caller(header)
    keys = table.get("keys") or {}
    if not isinstance(keys, dict):
        raise ConfigError("[caller] keys maps each API key to its principal id")
    return api_key_caller(header, {str(key): str(value) for key, value in keys.items()})


@dataclass(frozen=True)
class ProxyConfig:
    guard: ResourceGuard
    forward_unlisted: bool


def load_config(path: str | Path, *, environ: dict[str, str] | None = None) -> ProxyConfig:
    environ = dict(os.environ) if environ is None else environ
    path = Path(path)
    config = tomllib.loads(path.read_text())
    resource = config.get("resource") or {}
    reviewer = config.get("reviewer") or {}
    for table, name in ((resource, "resource.audience"), (reviewer, "reviewer.url")):
        if not table.get(name.split(".")[1]):
            raise ConfigError(f"routes.toml needs {name}")
    token_env = reviewer.get("api_token_env", "REVIEWER_GATE_API_TOKEN")
    api_token = environ.get(token_env)
    if not api_token:
        raise ConfigError(f"the registration's API token is read from ${token_env}, which is empty")
    key_file = path.parent / resource.get("key_file", "resource-key.pem")
    guard = ResourceGuard(
        routes=routes_from_config(config),
        audience=resource["audience"],
        reviewer_url=reviewer["url"],
        api_token=api_token,
        key=ResourceKey.from_file(key_file, create=True),
        caller=caller_from_config(config.get("caller") or {}),
        intake=bool(resource.get("intake", False)),
        issuer=reviewer.get("issuer"),
        tenant=reviewer.get("tenant"),
        agent=reviewer.get("agent"),
        retry_after_seconds=int(resource.get("retry_after_seconds", 5)),
        challenge_seconds=int(resource.get("challenge_seconds", 300)),
    )
    return ProxyConfig(guard=guard, forward_unlisted=bool(resource.get("forward_unlisted", False)))


class Forwarder:
    """The ASGI app behind the guard: sends a released (or, when allowed, unlisted) request upstream
    unchanged and streams nothing new back but the upstream's answer."""

    def __init__(self, upstream: str, *, forward_unlisted: bool, timeout: float = 30):
        self.upstream = upstream.rstrip("/")
        self.forward_unlisted = forward_unlisted
        self.http = httpx.AsyncClient(timeout=timeout)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        released = "reviewer_decision" in (scope.get("state") or {})
        if not released and not self.forward_unlisted:
            await send_answer(
                send, refusal(403, "access_denied", "this proxy forwards only the routes it protects")
            )
            return
        body = await read_body(receive, 1 << 62)
        headers = []
        for raw_name, raw_value in scope.get("headers", []):
            name = raw_name.decode("latin-1").lower()
            if name in HOP_BY_HOP or name == "accept-txn-challenge":
                continue
            if released and name == "authorization":
                continue  # the transaction token is this proxy's, not the upstream's
            headers.append((name, raw_value.decode("latin-1")))
        url = self.upstream + scope.get("raw_path", scope["path"].encode()).decode("latin-1")
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")
        try:
            response = await self.http.request(scope["method"], url, headers=headers, content=body)
        except httpx.HTTPError:
            # Unknown whether the upstream acted: a 502 is reported to Reviewer as outcome "unknown".
            await send_answer(send, refusal(502, "server_error", "the upstream did not answer"))
            return
        # httpx hands over the body decoded: its content-encoding no longer describes it.
        answer_headers = [
            (name, value)
            for name, value in response.headers.multi_items()
            if name.lower() not in HOP_BY_HOP and name.lower() != "content-encoding"
        ]
        await send_answer(send, Answer(response.status_code, answer_headers, response.content))

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.http.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


def build_app(config: ProxyConfig, upstream: str) -> ASGIApp:
    forwarder = Forwarder(upstream, forward_unlisted=config.forward_unlisted)
    return ReviewerGateMiddleware(forwarder, guard=config.guard)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m reviewer_gate.proxy", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--upstream", required=True, help="the protected API's base URL")
    parser.add_argument("--routes", required=True, help="routes.toml")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--fd", type=int, default=None, help="serve on this already listening socket instead")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.routes)
    except (ConfigError, OSError, ValueError, KeyError) as error:
        parser.exit(2, f"routes.toml: {error}\n")
    import uvicorn  # the extra `proxy`; imported here so that the module loads without it

    if args.fd is not None:
        uvicorn.run(build_app(config, args.upstream), fd=args.fd, log_level="warning")
    else:
        uvicorn.run(build_app(config, args.upstream), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
