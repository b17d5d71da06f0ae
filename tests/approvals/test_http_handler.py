"""reviewer/http_handler.py: Django's ASGI handler with the middleware chain built in sync mode, so a
request's middleware and view run as one call on the request's thread, not a hand-off per hook."""

import asyncio
import threading

import pytest
from channels.testing import HttpCommunicator
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
