"""Which requests a protected resource gates, and how each one is described as the operation it performs.

A route is a method and a path template (`/refunds/{order_id}`) with a function that reads the real
request (its method, path parameters and body) and returns the RAR `authorization_details` (RFC 9396)
of the operation it would perform. The function is the resource's own statement of what the request
does: the guard calls it on the first request (to ask for a decision) and again on the retry (to check
the decision against what this request would do), never reading the operation from a token.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

JSON_NUMBER_TYPES = (int, float)


class OperationError(ValueError):
    """The request cannot be described as an operation (a body that is not the JSON the route needs, a
    missing field): the guard answers 400 and nothing runs."""


@dataclass(frozen=True)
class ProtectedRequest:
    """The parts of an HTTP request a description may read. `path` is decoded (ASGI's `path`, WSGI's
    `PATH_INFO`); `headers` has lower-case names (repeated fields joined with ", ")."""

    method: str
    path: str
    query: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    path_params: Mapping[str, str] = field(default_factory=dict)

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def json(self) -> Any:
        """The body as JSON, or OperationError."""
        try:
            return json.loads(self.body or b"null")
        except ValueError as error:
            raise OperationError(f"the body is not JSON: {error}") from error

    def json_object(self) -> dict[str, Any]:
        body = self.json()
        if not isinstance(body, dict):
            raise OperationError("the body must be a JSON object")
        return body


# What a route's description returns: one authorization detail, or a list of them.
Describe = Callable[[ProtectedRequest], "dict[str, Any] | list[dict[str, Any]]"]


def authorization_detail(
    type_: str,
    *,
    target: str,
    amount: str | None = None,
    currency: str | None = None,
    actions: list[str] | None = None,
    **fields: str,
) -> dict[str, Any]:
    """One RAR authorization detail in the shape Reviewer reads: `type`, `locations` (the target),
    `actions` when given, the operation's own fields, `amount` and `currency` flat beside them.

    Values are strings: an amount is "40.00", never 40.0 (Reviewer refuses JSON numbers in an action's
    arguments, and "40.00" and "40.0" are different operations to the digest)."""
    detail: dict[str, Any] = {"type": type_, "locations": [target]}
    if actions:
        detail["actions"] = list(actions)
    if amount is not None:
        detail["amount"] = amount
    if currency is not None:
        detail["currency"] = currency
    for name, value in fields.items():
        detail[name] = value
    check_details([detail])
    return detail


def check_details(details: object) -> list[dict[str, Any]]:
    """The authorization details a description may return: one object with a string `type`, no JSON
    number anywhere (amounts are strings), as a list of one. Raises OperationError otherwise."""
    if isinstance(details, dict):
        details = [details]
    # Reviewer files one proposal per operation: exactly one detail (its TAC endpoint refuses more).
    if not isinstance(details, list) or len(details) != 1:
        raise OperationError("a description returns one authorization detail (or a list of exactly one)")
    for detail in details:
        if not isinstance(detail, dict) or not isinstance(detail.get("type"), str) or not detail["type"]:
            raise OperationError("every authorization detail is an object with a string type")
        _refuse_numbers(detail, "authorization_details")
    return details


def _refuse_numbers(value: object, where: str) -> None:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, JSON_NUMBER_TYPES):
        raise OperationError(f"{where} holds the number {value!r}: send amounts and counts as strings")
    if isinstance(value, dict):
        for key, item in value.items():
            _refuse_numbers(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _refuse_numbers(item, f"{where}[{index}]")
    else:
        raise OperationError(f"{where} holds a {type(value).__name__}, which JSON cannot carry")


_PARAMETER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _compile(template: str) -> re.Pattern[str]:
    if not template.startswith("/"):
        raise ValueError(f"a route's path starts with /: {template!r}")
    pattern, position = "", 0
    for match in _PARAMETER.finditer(template):
        pattern += re.escape(template[position : match.start()]) + f"(?P<{match.group(1)}>[^/]+)"
        position = match.end()
    return re.compile("^" + pattern + re.escape(template[position:]) + "$")


@dataclass(frozen=True)
class Route:
    """One protected operation: `method` and `path` (a template whose `{name}` parts match one path
    segment each), the description of the request as authorization details, and for the 202 mode the
    tool name Reviewer's policies know it by (default: the first detail's type) and a summary."""

    method: str
    path: str
    describe: Describe
    tool: str | None = None
    summary: Callable[[list[dict[str, Any]]], str] | None = None
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", self.method.upper())
        object.__setattr__(self, "_pattern", _compile(self.path))

    def match(self, method: str, path: str) -> dict[str, str] | None:
        """The path parameters when this route matches the request, else None."""
        if method.upper() != self.method:
            return None
        found = self._pattern.match(path)
        if found is None:
            return None
        return dict(found.groupdict())

    def details_of(self, request: ProtectedRequest) -> list[dict[str, Any]]:
        """The authorization details of the request (OperationError when it cannot be described)."""
        try:
            described = self.describe(request)
        except OperationError:
            raise
        except (KeyError, TypeError, ValueError) as error:
            raise OperationError(
                f"the request does not describe a {self.method} {self.path}: {error!r}"
            ) from error
        return check_details(described)

    def summary_of(self, details: list[dict[str, Any]]) -> str:
        if self.summary is not None:
            return self.summary(details)[:500]
        first = details[0]
        money = " ".join(str(first[key]) for key in ("currency", "amount") if key in first)
        target = (first.get("locations") or [""])[0]
        return " ".join(part for part in (first["type"], money, target) if part)[:500]


def find_route(routes: list[Route], method: str, path: str) -> tuple[Route, dict[str, str]] | None:
    """The first route that matches, with its path parameters."""
    for route in routes:
        params = route.match(method, path)
        if params is not None:
            return route, params
    return None


def request_fingerprint(request: ProtectedRequest) -> str:
    """What the request is, byte for byte: method, path, query and the SHA-256 of the body."""
    return "\n".join(
        (request.method.upper(), request.path, request.query, hashlib.sha256(request.body).hexdigest())
    )
