"""Web Push: a person subscribes a device under "Your devices"; a new proposal, a reminder and an
escalation reach it as a notification that opens the proposal; subscriptions are listed, removable, and
end when the person is deprovisioned. A browser vendor's push service cannot be reached from here: the
loopback PushService (tests/notify/receivers.py) checks the VAPID signature and decrypts the payload
with http_ece, as the browser would."""

import json

import pytest

from approvals.models.notifications import PushSubscription
from approvals.notify import push
from audit.models import AuditEvent, Verb
from tests import factories
from tests.factories import submit, trail_name

pytestmark = pytest.mark.django_db


def test_a_subscribed_phone_gets_the_new_proposal_encrypted_and_signed(
    settings, agent, refund_policy, push_service, requester, reviewer_a
):
    settings.REVIEWER_ISSUER = "https://reviewer.example.test"
    assert factories.subscribe_push_device(reviewer_a, push_service.subscription()).status_code == 201
    assert AuditEvent.objects.filter(verb=Verb.PUSH_DEVICE_ADDED, actor=trail_name("reviewer_a")).exists()
    proposal = submit(agent, summary="Refund EUR 40.00 \u202eto order 1182")
    assert push.push_to(reviewer_a, proposal, "new") == 1
    assert push.push_to(reviewer_a, proposal, "new") == 0  # once per proposal, person and reason
    (delivered,) = push_service.delivered
    assert push_service.refused == []
    payload = delivered["payload"]
    assert payload["title"] == "Approval requested"
    assert payload["url"] == f"https://reviewer.example.test/proposals/{proposal.id}/"
    assert payload["tag"] == str(proposal.id)
    assert "[U+202E]" in payload["body"] and "\u202e" not in payload["body"]
    assert proposal.action_digest not in json.dumps(payload)


def test_the_devices_are_listed_and_removable(agent, push_service, reviewer_a):
    factories.subscribe_push_device(reviewer_a, push_service.subscription())
    client = factories.verified_client(reviewer_a)
    page = client.get("/push/devices/")
    assert b"Alice&#x27;s phone" in page.content
    device = PushSubscription.objects.get(user=reviewer_a)
    client.post(f"/push/devices/{device.pk}/remove")
    assert not PushSubscription.objects.exists()
    assert AuditEvent.objects.filter(verb=Verb.PUSH_DEVICE_REMOVED).exists()


def test_a_push_service_off_the_list_is_refused_at_subscription(settings, push_service, reviewer_a):
    settings.WEB_PUSH_SERVICE_HOSTS = ["fcm.googleapis.com"]
    response = factories.subscribe_push_device(reviewer_a, push_service.subscription())
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "push_endpoint"
    assert not PushSubscription.objects.exists()


def test_subscriptions_end_when_the_person_is_deprovisioned(agent, refund_policy, push_service, reviewer_a):
    factories.subscribe_push_device(reviewer_a, push_service.subscription())
    reviewer_a.is_active = False
    reviewer_a.save(update_fields=["is_active"])
    push.run()
    assert not PushSubscription.objects.exists()


def test_a_subscription_the_push_service_dropped_is_removed(
    agent, refund_policy, push_service, requester, reviewer_a
):
    factories.subscribe_push_device(reviewer_a, push_service.subscription())
    push_service.status = 410
    proposal = submit(agent)
    push.push_to(reviewer_a, proposal, "new")
    assert not PushSubscription.objects.exists()


def test_the_app_is_installable(client):
    manifest = client.get("/manifest.webmanifest")
    assert manifest["Content-Type"] == "application/manifest+json"
    body = manifest.json()
    assert body["display"] == "standalone" and body["start_url"] == "/" and body["icons"]
    worker = client.get("/sw.js")
    assert worker["Content-Type"] == "application/javascript" and worker["Service-Worker-Allowed"] == "/"
    assert b"showNotification" in worker.content and b"openWindow" in worker.content


def test_the_worker_pushes_a_new_proposal_then_its_reminder_and_escalation(
    tenant, agent, push_service, requester, reviewer_a, reviewer_c
):
    from datetime import timedelta

    import time_machine

    from approvals.worker.loop import Worker

    factories.make_group(tenant, "ops")
    factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        ttl_seconds=1000,
        notifications={"reminders": [50], "escalation": {"before_expiry_seconds": 300, "group": "ops"}},
    )
    factories.subscribe_push_device(reviewer_a, push_service.subscription("/push/alice"))
    factories.subscribe_push_device(
        reviewer_c, push_service.subscription("/push/carol"), name="Carol's phone"
    )
    proposal = submit(agent)
    Worker().tick()
    with time_machine.travel(proposal.created_at + timedelta(seconds=501), tick=False):
        Worker().tick()
    with time_machine.travel(proposal.expires_at - timedelta(seconds=299), tick=False):
        Worker().tick()
    got = [(d["path"], d["payload"]["title"]) for d in push_service.delivered]
    assert got == [
        ("/push/alice", "Approval requested"),
        ("/push/alice", "Reminder: still waiting for you"),
        ("/push/carol", "Escalated to you"),
    ]
