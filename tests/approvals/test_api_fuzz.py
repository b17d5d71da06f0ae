"""Schemathesis against the agent API's own OpenAPI document (issue 9, point 8): generated requests,
valid and invalid, to every operation as an authenticated agent, with a bounded number of examples,
and not one answer may be a 500. Requests go through Django's WSGI handler in this process, on the
test database."""

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

pytestmark = pytest.mark.django_db

EXAMPLES_PER_OPERATION = 20


@pytest.fixture
def api_schema(agent, refund_policy, requester):
    return schemathesis.openapi.from_wsgi("/api/v1/openapi.json", get_wsgi_application())


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
