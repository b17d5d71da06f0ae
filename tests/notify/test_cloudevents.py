"""Webhooks as CloudEvents 1.0 (an endpoint's `envelope`, approvals/notify/webhook_sender.py): the HTTP
binding's structured JSON mode, still signed per Standard Webhooks. The loopback receiver
(tests/notify/receivers.py) verifies the signature with the `standardwebhooks` library; the event is
checked against the CloudEvents 1.0 specification's rules for attributes (written out below, from the
specification's text), and parsed by the CloudEvents SDK (`cloudevents`) where it is installed."""

import re
from datetime import datetime
from urllib.parse import urlsplit

import pytest

from approvals.models.notifications import WebhookEndpoint
from approvals.services.webhooks import register_endpoint
from approvals.worker.loop import Worker
from lib.errors import ConfigRefused
from tests import factories
from tests.factories import submit
from tests.notify.receivers import WebhookReceiver

pytestmark = pytest.mark.django_db

# CloudEvents 1.0, "Attribute Naming Convention": lower-case ASCII letters or digits; SHOULD be at most 20.
ATTRIBUTE_NAME = re.compile(r"[a-z0-9]{1,20}")


@pytest.fixture
def receiver(settings):
    server = WebhookReceiver()
    settings.NOTIFY_ALLOW_HTTP = True  # the loopback receiver speaks plain HTTP
    settings.AGENT_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    yield server
    server.stop()


def endpoint_for(tenant, receiver, envelope):
    endpoint = register_endpoint(tenant=tenant, url=receiver.origin + "/hooks/ce", envelope=envelope)
    receiver.secret = endpoint.secret
    return endpoint


def check_cloudevent(event: dict) -> None:
    """The CloudEvents 1.0 specification's rules for a JSON-format event, attribute by attribute."""
    for required in ("specversion", "id", "source", "type"):  # REQUIRED context attributes
        assert isinstance(event.get(required), str) and event[required], required
    assert event["specversion"] == "1.0"
    source = urlsplit(event["source"])  # a URI-reference; Reviewer's is absolute
    assert source.scheme in ("http", "https") and source.netloc
    time = event["time"]  # OPTIONAL; when present, RFC 3339
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", time)
    datetime.fromisoformat(time)
    assert event["datacontenttype"] == "application/json"  # RFC 2046 media type of `data`
    assert isinstance(event["subject"], str) and event["subject"]
    for name in event:
        assert name == "data" or ATTRIBUTE_NAME.fullmatch(name), name
    assert isinstance(event["data"], dict)  # JSON data is carried as JSON, not as a string


def test_a_cloudevents_endpoint_gets_each_transition_as_a_structured_cloudevent(
    tenant, agent, refund_policy, receiver, requester, reviewer_a, settings
):
    endpoint_for(tenant, receiver, WebhookEndpoint.Envelope.CLOUDEVENTS)
    proposal = submit(agent)

    factories.vote(proposal, reviewer_a)
    Worker().tick()

    assert receiver.refused == []  # the Standard Webhooks signature verifies
    events = [verified["event"] for verified in receiver.verified]
    assert [event["type"] for event in events] == [
        "reviewer.proposal.awaiting_review",
        "reviewer.proposal.approved",
    ]
    for verified in receiver.verified:
        event, headers = verified["event"], verified["headers"]
        check_cloudevent(event)
        assert headers["content-type"] == "application/cloudevents+json; charset=utf-8"  # structured mode
        assert event["id"] == verified["id"]  # the webhook-id: the same on a retry, so a duplicate
        assert event["source"] == settings.REVIEWER_ISSUER
        assert event["subject"] == f"proposals/{proposal.id}"
        assert event["data"]["proposal_id"] == str(proposal.id)
    assert events[1]["data"]["previous_state"] == "awaiting_review"


def test_the_cloudevents_sdk_reads_the_event(tenant, agent, refund_policy, receiver, requester, reviewer_a):
    """The CNCF CloudEvents SDK (PyPI `cloudevents`, 2.x: it validates every attribute as it reads)."""
    http = pytest.importorskip(
        "cloudevents.core.bindings.http", reason="the CloudEvents SDK (PyPI `cloudevents` 2.x)"
    )
    endpoint_for(tenant, receiver, WebhookEndpoint.Envelope.CLOUDEVENTS)
    submit(agent)

    Worker().tick()

    (verified,) = receiver.verified
    event = http.from_structured_event(http.HTTPMessage(headers=verified["headers"], body=verified["body"]))
    assert event.get_specversion() == "1.0"
    assert event.get_id() == verified["id"]
    assert event.get_type() == "reviewer.proposal.awaiting_review"
    assert event.get_subject() == verified["event"]["subject"]
    assert event.get_data() == verified["event"]["data"]


def test_a_standard_endpoint_keeps_the_standard_webhooks_body(
    tenant, agent, refund_policy, receiver, requester
):
    endpoint_for(tenant, receiver, WebhookEndpoint.Envelope.STANDARD)
    submit(agent)

    Worker().tick()

    (verified,) = receiver.verified
    assert verified["headers"]["content-type"] == "application/json"
    assert set(verified["event"]) == {"type", "timestamp", "data"}
    assert verified["event"]["type"] == "proposal.awaiting_review"


def test_an_unknown_envelope_is_refused_and_nothing_is_stored(tenant, settings):
    settings.AGENT_ALLOWED_HOSTS = ["hooks.example.test"]  # the URL passes; only the envelope is wrong
    with pytest.raises(ConfigRefused) as refused:
        register_endpoint(tenant=tenant, url="https://hooks.example.test/x", envelope="binary")

    assert refused.value.field == "envelope"
    assert not WebhookEndpoint.objects.exists()


def test_a_tenant_admin_chooses_cloudevents_in_the_admin(tenant, settings):
    settings.AGENT_ALLOWED_HOSTS = ["hooks.example.test"]  # registration judges the URL as delivery would
    author, _ = factories.policy_admins()
    client = factories.verified_client(author)

    response = client.post(
        "/admin/approvals/webhookendpoint/add/",
        {"tenant": tenant.pk, "url": "https://hooks.example.test/ce", "envelope": "cloudevents"},
    )

    assert response.status_code == 302
    assert WebhookEndpoint.objects.get().envelope == WebhookEndpoint.Envelope.CLOUDEVENTS
