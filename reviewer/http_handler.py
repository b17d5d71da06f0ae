"""Django's ASGI handler, with the middleware and the view run as one synchronous call.

Every view and every middleware of Reviewer is synchronous. Django's own ASGIHandler builds the
middleware chain in async mode, and then each of the chain's `MiddlewareMixin` classes enters the
request's thread for its `process_request` and again for its `process_response`: about a dozen hand-offs
between the event loop and that thread per request, each waiting for the other side to be scheduled
and to take the GIL. A trace of the agent's consume through Daphne (bench/README.md, R1) put 6.4 ms
between the request reaching Django and the view starting, and 3.9 ms between the view returning and
the response starting, around a 3.3 ms view.

Here the chain is built in sync mode and run by one `sync_to_async` call: Django's request-started
signal, the whole chain with the view, and the response's close (the request-finished signal) are the
only hand-offs. The request still runs on its own thread (the handler's per-request
ThreadSensitiveContext), the same thread every piece of its sync code ran on before. Behaviour is
Django's sync path, the one the test client exercises.

It relies on Django's internals: ASGIHandler.__init__ doing no more than BaseHandler's and
`load_middleware(is_async=True)`, `load_middleware(is_async=...)` setting `_middleware_chain`,
`run_get_response` awaiting `get_response_async`, and the sync `get_response` doing what the async one
does. tests/approvals/test_http_handler.py checks each of them, so a Django upgrade that changes one
fails there by name.
"""

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler


class OneThreadASGIHandler(ASGIHandler):
    def __init__(self):
        BaseHandler.__init__(self)  # not ASGIHandler.__init__, which loads the chain in async mode
        self.load_middleware(is_async=False)

    async def get_response_async(self, request):
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)
