"""scim2-client against Reviewer's SCIM endpoints, in this process through WSGI (scim2-client's own
in-process engine: the server runs on the test's database and its exceptions reach the test)."""

from contextlib import contextmanager

from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from scim2_client.engines.wsgi import WSGISCIMClient

BASE_URL = "http://testserver/scim/v2"


@contextmanager
def _connections_kept():
    """As Django's test client does: a request must not close the test's database connection (it holds
    the test's transaction)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def _test_wsgi_application():
    handler = get_wsgi_application()

    def application(environ, start_response):
        with _connections_kept():
            response = handler(environ, start_response)
            body = list(response)
            response.close()
        return body

    return application


def scim_client(token: str, *, discover=True) -> WSGISCIMClient:
    client = WSGISCIMClient(
        _test_wsgi_application(), base_url=BASE_URL, headers={"Authorization": f"Bearer {token}"}
    )
    if discover:
        client.discover()
    return client
