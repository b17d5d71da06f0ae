"""reviewer/http_handler.py: Django's ASGI handler with the middleware chain built in sync mode, so a
request's middleware and view run as one call on the request's thread, not a hand-off per hook."""

import ast
import asyncio
import inspect
import textwrap
import threading

import pytest
from channels.testing import HttpCommunicator
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler
from django.http import HttpResponse
from django.urls import path
from django.utils.deprecation import MiddlewareMixin

from reviewer.http_handler import OneThreadASGIHandler

pytestmark = pytest.mark.database_independent

THREADS: list[tuple[str, int]] = []


class RecordsItsThread(MiddlewareMixin):
    """A middleware of the kind Django's async chain enters the request's thread for twice."""

    def process_request(self, request):
        THREADS.append(("process_request", threading.get_ident()))

    def process_response(self, request, response):
        THREADS.append(("process_response", threading.get_ident()))
        return response


def view(request):
    THREADS.append(("view", threading.get_ident()))
    return HttpResponse("ok", content_type="text/plain")


urlpatterns = [path("thread/", view)]


@pytest.fixture
def handler(settings):
    settings.ROOT_URLCONF = __name__
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, f"{__name__}.RecordsItsThread"]
    THREADS.clear()
    return OneThreadASGIHandler()


def test_the_middleware_chain_is_one_synchronous_call(handler):
    assert not asyncio.iscoroutinefunction(handler._middleware_chain)


async def test_middleware_and_view_run_on_one_thread_that_is_not_the_event_loops(handler):
    communicator = HttpCommunicator(handler, "GET", "/thread/", headers=[(b"host", b"testserver")])
    response = await communicator.get_response(timeout=10)

    assert response["status"] == 200 and response["body"] == b"ok"
    assert [step for step, _ in THREADS] == ["process_request", "view", "process_response"]
    assert len({thread for _, thread in THREADS}) == 1
    assert THREADS[0][1] != threading.get_ident()


# What OneThreadASGIHandler takes from Django's internals. A Django upgrade that changes any of it fails
# here, by name, before the handler misbehaves in production.


def statements(function) -> list[str]:
    """The function's body as source lines of its statements, docstring left out."""
    definition = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
    assert isinstance(definition, ast.FunctionDef | ast.AsyncFunctionDef)
    body = definition.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return [ast.unparse(statement) for statement in body]


def test_asgi_handlers_init_does_only_what_the_subclass_does_in_sync_mode():
    """The subclass calls BaseHandler.__init__ and loads the chain in sync mode instead of calling
    ASGIHandler.__init__ (which would load it in async mode first): anything more Django's __init__
    did would be skipped."""
    assert ASGIHandler.__mro__[1] is BaseHandler
    assert statements(ASGIHandler.__init__) == ["super().__init__()", "self.load_middleware(is_async=True)"]
    assert str(inspect.signature(BaseHandler.__init__)) in ("(self, /, *args, **kwargs)", "(self)")


def test_load_middleware_takes_is_async_and_sets_the_chain():
    assert str(inspect.signature(BaseHandler.load_middleware)) == "(self, is_async=False)"
    assert "self._middleware_chain = handler" in statements(BaseHandler.load_middleware)


def test_the_asgi_path_awaits_get_response_async_which_the_subclass_replaces():
    assert inspect.iscoroutinefunction(ASGIHandler.run_get_response)
    assert "response = await self.get_response_async(request)" in statements(ASGIHandler.run_get_response)
    assert inspect.iscoroutinefunction(BaseHandler.get_response_async)
    assert str(inspect.signature(BaseHandler.get_response_async)) == "(self, request)"


def test_the_sync_get_response_does_what_the_async_one_does():
    """The subclass answers get_response_async with the sync get_response on the request's thread: the
    two must do the same (resolver, chain, closing the request, logging errors), bar the awaits."""
    assert not inspect.iscoroutinefunction(BaseHandler.get_response)
    assert str(inspect.signature(BaseHandler.get_response)) == "(self, request)"
    sync_steps = statements(BaseHandler.get_response)
    async_steps = [
        step.replace("await self._middleware_chain", "self._middleware_chain").replace(
            "await sync_to_async(log_response, thread_sensitive=False)", "log_response"
        )
        for step in statements(BaseHandler.get_response_async)
    ]
    assert sync_steps == async_steps
