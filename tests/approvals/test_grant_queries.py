"""A call allowed under a standing grant costs one query more at intake than a call policy allows (the
grant's lock and read), and its consume costs the same: the grant's spend and its use are held with
intake's other writes (approvals/storage/rows.py `update_held`), one round trip for all of them on
PostgreSQL. Bench
row R10 times the two; this counts them, which a loaded machine does not change."""

import uuid

import jwt
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.models import Grant, PolicyVersion
from tests import factories
from tests.approvals.grant_helpers import active_grant, grant_policy
from tests.factories import approval_request

pytestmark = pytest.mark.django_db

AUTH = {"HTTP_AUTHORIZATION": "Bearer puller-secret"}


def call(client, tool: str) -> tuple[int, int]:
    """Submit a EUR 25.00 call of `tool` and consume its decision: the queries of each."""
    action = {**factories.refund_action(amount="25.00"), "tool": tool}
    body = {"task_id": f"task-{uuid.uuid4()}", "request": approval_request(action=action)}
    with CaptureQueriesContext(connection) as submitted:
        answer = client.post("/api/v1/proposals", data=body, content_type="application/json", **AUTH)
    assert answer.status_code == 201 and answer.json()["token"], answer.json()
    claims = jwt.decode(answer.json()["token"], options={"verify_signature": False})
    with CaptureQueriesContext(connection) as consumed:
        done = client.post(
            f"/api/v1/decisions/{claims['jti']}/consume",
            data={"rev": claims["rev"]},
            content_type="application/json",
            **AUTH,
        )
    assert done.status_code == 200, done.json()
    return len(submitted), len(consumed)


def test_a_call_under_a_grant_costs_one_query_more_than_a_policy_allowed_call(
    client, tenant, refund_policy, reviewer_a, reviewer_b
):
    # R10's agent: it reads its decisions by pull (no card URL, no outbox row).
    agent = factories.make_agent(tenant, slug="puller", api_token="puller-secret", card_url="")
    factories.make_policy(
        tenant, "credits", tool_pattern="payments.credit", outcome=PolicyVersion.Outcome.ALLOW
    )
    grant_policy(tenant)
    grant = active_grant(agent, reviewer_a, reviewer_b, max_uses="100", max_amount={"EUR": "5000.00"})
    call(client, "payments.credit")  # the first intake of a tenant creates its chain head

    policy_submit, policy_consume = call(client, "payments.credit")
    grant_submit, grant_consume = call(client, "payments.refund")

    assert Grant.objects.get(pk=grant.pk).uses == 1
    # SQLite sends each held write alone: the grant's UPDATE and its use's INSERT are two more.
    assert grant_submit == policy_submit + (1 if connection.vendor == "postgresql" else 3)
    assert grant_consume == policy_consume
