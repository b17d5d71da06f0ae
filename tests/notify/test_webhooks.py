"""Tenant webhooks: each proposal transition becomes one Standard Webhooks request per endpoint, queued in
the transition's transaction and delivered by the worker through the outbox (retries, dead letters) and
the outbound allow-list. A tenant's real endpoint cannot be reached from here: a loopback receiver
(tests/notify/receivers.py) verifies each request with the `standardwebhooks` library."""

import pytest

from approvals.models import OutboxMessage
from approvals.services.webhooks import register_endpoint
from approvals.worker.loop import Worker
from lib.errors import ConfigRefused
from tests import factories
from tests.factories import submit, trail_name
from tests.notify.receivers import WebhookReceiver

pytestmark = pytest.mark.django_db


@pytest.fixture
def receiver(settings):
    server = WebhookReceiver()
    settings.NOTIFY_ALLOW_HTTP = True  # the loopback receiver speaks plain HTTP
    settings.AGENT_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    yield server
    server.stop()


def endpoint_for(tenant, receiver, events=()):
    endpoint = register_endpoint(tenant=tenant, url=receiver.origin + "/hooks/reviewer", events=list(events))
    receiver.secret = endpoint.secret
    return endpoint


def test_a_decision_reaches_the_endpoint_signed_and_verifies(
    tenant, agent, refund_policy, receiver, requester, reviewer_a
):
    endpoint_for(tenant, receiver)
    proposal = submit(agent)
    factories.vote(proposal, reviewer_a)
    Worker().tick()
    types = [v["event"]["type"] for v in receiver.verified]
    assert types == ["proposal.awaiting_review", "proposal.approved"]
    approved = receiver.verified[1]["event"]
    assert approved["data"]["proposal_id"] == str(proposal.id)
    assert approved["data"]["previous_state"] == "awaiting_review"
    assert receiver.refused == []
    sent = str(receiver.verified)
    proposal.refresh_from_db()
    assert proposal.decision.token not in sent and proposal.action_digest not in sent  # nothing secret
    assert proposal.summary not in sent  # agent text beyond the tool stays on the page


def test_an_endpoint_gets_only_the_events_it_asked_for(tenant, agent, refund_policy, receiver, requester):
    endpoint_for(tenant, receiver, events=["proposal.expired"])
    submit(agent)
    Worker().tick()
    assert receiver.verified == []
    assert not OutboxMessage.objects.filter(kind=OutboxMessage.Kind.WEBHOOK).exists()


def test_a_failing_endpoint_is_retried_with_the_same_id_then_dead_lettered(
    settings, tenant, agent, refund_policy, receiver, requester
):
    settings.OUTBOX_MAX_ATTEMPTS = 2
    endpoint_for(tenant, receiver, events=["proposal.awaiting_review"])
    submit(agent)
    receiver.status = 500
    Worker().tick()
    (message,) = OutboxMessage.objects.filter(kind=OutboxMessage.Kind.WEBHOOK)
    assert message.status == "pending" and "500" in message.last_error
    Worker().tick(now=message.next_attempt_at)
    message.refresh_from_db()
    assert message.status == "dead"  # it shows in the dead-letter list
    receiver.status = 204
    assert receiver.verified == []


def test_a_wrong_secret_fails_verification_at_the_receiver(tenant, agent, refund_policy, receiver, requester):
    endpoint_for(tenant, receiver)
    receiver.secret = "whsec_" + "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE="  # not the endpoint's
    submit(agent)
    Worker().tick()
    assert receiver.verified == [] and receiver.refused  # the receiver refused a signature it cannot verify


def test_an_endpoint_off_the_allow_list_is_never_called(
    settings, tenant, agent, refund_policy, receiver, requester
):
    settings.AGENT_ALLOWED_NETWORKS = []
    endpoint_for(tenant, receiver)
    submit(agent)
    Worker().tick()
    message = OutboxMessage.objects.get(kind=OutboxMessage.Kind.WEBHOOK)
    assert "allow-list" in message.last_error
    assert receiver.verified == [] and receiver.refused == []


def test_only_https_endpoints_and_known_events_are_registered(settings, tenant):
    settings.NOTIFY_ALLOW_HTTP = False
    with pytest.raises(ConfigRefused) as refused:
        register_endpoint(tenant=tenant, url="http://hooks.example.test/x")
    assert refused.value.field == "url"
    with pytest.raises(ConfigRefused) as refused:
        register_endpoint(tenant=tenant, url="https://hooks.example.test/x", events=["proposal.exploded"])
    assert refused.value.field == "events"


def test_a_tenant_admin_registers_an_endpoint_in_the_admin_and_sees_the_secret_once(tenant):
    from django.contrib.messages import get_messages

    from approvals.models.notifications import WebhookEndpoint
    from audit.models import AuditEvent, Verb

    author, _ = factories.policy_admins()
    client = factories.verified_client(author)
    response = client.post(
        "/admin/approvals/webhookendpoint/add/",
        {"tenant": tenant.pk, "url": "https://hooks.example.test/reviewer", "events": ["proposal.approved"]},
    )
    assert response.status_code == 302
    endpoint = WebhookEndpoint.objects.get()
    assert endpoint.events == ["proposal.approved"] and endpoint.secret.startswith("whsec_")
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert any(endpoint.secret in m for m in shown)
    assert AuditEvent.objects.filter(verb=Verb.WEBHOOK_REGISTERED, actor=trail_name("policy-author")).exists()
    assert endpoint.secret not in str(AuditEvent.objects.get(verb=Verb.WEBHOOK_REGISTERED).data)
