"""scim2-client against Reviewer's SCIM endpoints, in this process through WSGI (scim2-client's own
in-process engine: the server runs on the test's database and its exceptions reach the test)."""

from django.core.wsgi import get_wsgi_application
from scim2_client.engines.wsgi import WSGISCIMClient

BASE_URL = "http://testserver/scim/v2"


def scim_client(token: str, *, discover=True) -> WSGISCIMClient:
    client = WSGISCIMClient(
        get_wsgi_application(),
        base_url=BASE_URL,
        headers={"Authorization": f"Bearer {token}"},
    )
    if discover:
        client.discover()
    return client
