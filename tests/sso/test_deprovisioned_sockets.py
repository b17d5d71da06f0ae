"""A person deprovisioned by SCIM loses their open pages at once: their queue and proposal sockets (the
real ASGI app, signed in through a real session) close, and nobody else's do."""

import json

import pytest
from channels.db import database_sync_to_async
from django.test import Client

from sso.models import IdentityProvider
from sso.scim.auth import issue_token
from tests.approvals.test_consumers import TIMEOUT, _own_channel_prefix, connected, proposal_path, sign_in  # noqa: F401
from tests.factories import submit

pytestmark = pytest.mark.django_db(transaction=True)


def provision_and_link(tenant, reviewer):
    """reviewer_a as SCIM knows them (a ScimUser over their account); returns the tenant's token and id."""
    from sso.models import ScimUser

    provider = IdentityProvider.objects.create(
        tenant=tenant, display_name="Acme IdP", issuer="https://idp.acme.example", client_id="reviewer"
    )
    record = ScimUser.objects.create(tenant=tenant, user=reviewer, user_name=reviewer.username)
    return issue_token(provider), str(record.scim_id)


def deactivate(token, scim_id):
    answer = Client().patch(
        f"/scim/v2/Users/{scim_id}",
        data=json.dumps(
            {
                "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
                "Operations": [{"op": "replace", "value": {"active": False}}],
            }
        ),
        content_type="application/scim+json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert answer.status_code == 200, answer.content


async def test_deactivation_closes_the_persons_sockets_and_no_one_elses(
    tenant, agent, refund_policy, requester, reviewer_a, reviewer_b
):
    proposal = await database_sync_to_async(submit)(agent)
    token, scim_id = await database_sync_to_async(provision_and_link)(tenant, reviewer_a)
    leaving = await database_sync_to_async(sign_in)(reviewer_a)
    staying = await database_sync_to_async(sign_in)(reviewer_b)
    leaving_queue = await connected("/ws/queue/", leaving)
    leaving_page = await connected(proposal_path(proposal), leaving)
    staying_page = await connected(proposal_path(proposal), staying)

    await database_sync_to_async(deactivate)(token, scim_id)

    # 4403: the page says its access ended (static/js/reviewer.js) and does not try to reconnect
    assert await leaving_queue.receive_output(timeout=TIMEOUT) == {"type": "websocket.close", "code": 4403}
    assert await leaving_page.receive_output(timeout=TIMEOUT) == {"type": "websocket.close", "code": 4403}
    assert (await staying_page.receive_output(timeout=TIMEOUT))["type"] == "websocket.send"
    await staying_page.disconnect()
    assert await database_sync_to_async(next_page_status)(leaving) == 302  # back to the sign-in page
    assert await database_sync_to_async(next_page_status)(staying) == 200


def next_page_status(session_id) -> int:
    client = Client()
    client.cookies["sessionid"] = session_id
    return client.get("/").status_code


def also_in(tenant, user):
    from tenants.models import TenantMembership

    TenantMembership.objects.create(tenant=tenant, user=user)


async def test_deactivation_closes_the_queue_of_a_person_another_tenant_keeps(
    tenant, other_tenant, agent, refund_policy, reviewer_a
):
    """The person stays signed in (the other tenant has them), but the queue that showed the
    deprovisioning tenant's work closes: its access ended there."""
    await database_sync_to_async(also_in)(other_tenant, reviewer_a)
    token, scim_id = await database_sync_to_async(provision_and_link)(tenant, reviewer_a)
    session = await database_sync_to_async(sign_in)(reviewer_a)
    queue = await connected("/ws/queue/", session)

    await database_sync_to_async(deactivate)(token, scim_id)

    assert await queue.receive_output(timeout=TIMEOUT) == {"type": "websocket.close", "code": 4403}
    assert await database_sync_to_async(next_page_status)(session) == 200  # still in the other tenant
