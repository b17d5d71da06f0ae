"""The guard as WSGI middleware: Django (`get_wsgi_application()`), Flask, any WSGI app.

    # Django: wsgi.py
    application = ReviewerGateWSGIMiddleware(get_wsgi_application(), guard=guard)

As the ASGI middleware: a protected request's body is read whole (at most `max_body_bytes`), the guard
decides, and the app sees the very same bytes only when released; the verified decision is in
`environ["reviewer_gate.decision"]` (Django: `request.META["reviewer_gate.decision"]`). The outcome is
reported when the server closes the response (its status, or `unknown` when the app raised).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from http import HTTPStatus
from typing import Any

from reviewer_gate.resource.answers import Answer
from reviewer_gate.resource.guard import Release, ResourceGuard
from reviewer_gate.resource.routes import ProtectedRequest

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

DECISION_KEY = "reviewer_gate.decision"
DEFAULT_MAX_BODY_BYTES = 1024 * 1024


def request_from_environ(environ: dict[str, Any], body: bytes) -> ProtectedRequest:
    headers = {
        key[5:].replace("_", "-").lower(): str(value)
        for key, value in environ.items()
        if key.startswith("HTTP_")
    }
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(key):
            headers[key.replace("_", "-").lower()] = str(environ[key])
    return ProtectedRequest(
        method=environ["REQUEST_METHOD"],
        path=environ.get("PATH_INFO") or "/",
        query=environ.get("QUERY_STRING", ""),
        headers=headers,
        body=body,
    )


def _status_line(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


class _Settled:
    """The app's response, reporting the outcome once the server closes it."""

    def __init__(self, body: Iterable[bytes], settle: Callable[[], object]):
        self._body = body
        self._settle = settle

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._body)

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            self._settle()


class ReviewerGateWSGIMiddleware:
    def __init__(self, app: WSGIApp, *, guard: ResourceGuard, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES):
        self.app = app
        self.guard = guard
        self.max_body_bytes = max_body_bytes

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if not self.guard.concerns(environ["REQUEST_METHOD"], environ.get("PATH_INFO") or "/"):
            return self.app(environ, start_response)
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > self.max_body_bytes:
            return self._answer(
                start_response,
                Answer.json(413, {"error": "invalid_request", "error_description": "body too large"}),
            )
        body = environ["wsgi.input"].read(length) if length else b""
        verdict = self.guard.handle(request_from_environ(environ, body))
        environ["wsgi.input"] = io.BytesIO(body)
        if verdict is None:
            return self.app(environ, start_response)
        if isinstance(verdict, Answer):
            return self._answer(start_response, verdict)
        return self._run(verdict, environ, start_response)

    @staticmethod
    def _answer(start_response: StartResponse, answer: Answer) -> list[bytes]:
        start_response(
            _status_line(answer.status), [*answer.headers, ("content-length", str(len(answer.body)))]
        )
        return [answer.body]

    def _run(
        self, release: Release, environ: dict[str, Any], start_response: StartResponse
    ) -> Iterable[bytes]:
        status: list[int] = []

        def start_and_watch(status_line: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            status.append(int(status_line.split(" ", 1)[0]))
            return start_response(status_line, headers, exc_info)

        environ[DECISION_KEY] = release.decision
        try:
            body = self.app(environ, start_and_watch)
        except BaseException:
            self.guard.settle(release, None)
            raise
        return _Settled(body, lambda: self.guard.settle(release, status[-1] if status else None))
