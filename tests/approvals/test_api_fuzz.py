"""Schemathesis against the agent API's own OpenAPI document: generated requests,
valid and invalid, to every operation as an authenticated agent, with a bounded number of examples,
and not one answer may be a 500. Requests go through Django's WSGI handler in this process, on the
test database."""

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

pytestmark = pytest.mark.django_db

EXAMPLES_PER_OPERATION = 20


@pytest.fixture
def api_schema(agent, refund_policy, requester):
    # Django's WSGI handler closes "old" database connections around each request, which would end the
    # test's transaction on PostgreSQL; its test Client does the same as this.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield schemathesis.openapi.from_wsgi("/api/v1/openapi.json", get_wsgi_application())
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    derandomize=True,  # the same examples on every run: a failure here is reproducible
    suppress_health_check=list(HealthCheck),
)
def test_no_generated_request_gets_a_server_error(case):
    case.headers = {**(case.headers or {}), "Authorization": "Bearer api-secret"}

    response = case.call()

    case.validate_response(response, checks=[not_a_server_error])
