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
    endpoint_for(tenant, receiver)
    settings.AGENT_ALLOWED_NETWORKS = []  # the operator narrowed the allow-list after the registration
    submit(agent)
    Worker().tick()
    message = OutboxMessage.objects.get(kind=OutboxMessage.Kind.WEBHOOK)
    assert "allow-list" in message.last_error
    assert receiver.verified == [] and receiver.refused == []


def test_only_https_endpoints_and_known_events_are_registered(settings, tenant):
    settings.NOTIFY_ALLOW_HTTP = False
    settings.AGENT_ALLOWED_HOSTS = [".example.test"]
    with pytest.raises(ConfigRefused) as refused:
        register_endpoint(tenant=tenant, url="http://hooks.example.test/x")
    assert refused.value.field == "url"
    with pytest.raises(ConfigRefused) as refused:
        register_endpoint(tenant=tenant, url="https://hooks.example.test/x", events=["proposal.exploded"])
    assert refused.value.field == "events"


def test_a_tenant_admin_registers_an_endpoint_in_the_admin_and_sees_the_secret_once(settings, tenant):
    from django.contrib.messages import get_messages

    from approvals.models.notifications import WebhookEndpoint
    from audit.models import AuditEvent, Verb

    author, _ = factories.policy_admins()
    client = factories.verified_client(author)
    settings.AGENT_ALLOWED_HOSTS = ["hooks.example.test"]
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


# --- registration judges the URL as delivery would (lib/outbound.py) -------------------------------------

NOT_DELIVERABLE = [
    ("https://127.0.0.1/hooks", "private or loopback"),
    ("https://localhost:8443/hooks", "private or loopback"),
    ("https://[::1]/hooks", "private or loopback"),
    ("https://10.1.2.3/hooks", "private or loopback"),
    ("https://169.254.169.254/latest/meta-data/", "link-local"),
    ("https://100.100.100.200/", "metadata"),
    ("https://[64:ff9b::a9fe:a9fe]/", "link-local"),  # the metadata address, carried in NAT64
    ("https://[::ffff:127.0.0.1]/hooks", "private or loopback"),
    ("https://0x7f000001/hooks", "private or loopback"),  # 127.0.0.1 spelled as one number
]
# Whose host name is not allowed (the others' names are, so that the address itself is judged).
NAME_NOT_ALLOWED = [
    ("https://hooks.unknown.test/hooks", "does not resolve, and is not in AGENT_ALLOWED_HOSTS"),
    ("https://93.184.215.14/hooks", "neither the host is in AGENT_ALLOWED_HOSTS"),  # public, not allowed
    ("https://127.0.0.1/hooks", "neither the host is in AGENT_ALLOWED_HOSTS"),
]


@pytest.mark.parametrize(
    "url, why, name_allowed",
    [(url, why, True) for url, why in NOT_DELIVERABLE] + [(url, why, False) for url, why in NAME_NOT_ALLOWED],
)
def test_an_endpoint_delivery_would_refuse_is_refused_at_registration_with_the_reason(
    settings, tenant, url, why, name_allowed
):
    from urllib.parse import urlsplit

    from approvals.models.notifications import WebhookEndpoint
    from audit.models import AuditEvent, Verb

    settings.AGENT_ALLOWED_HOSTS = [urlsplit(url).hostname] if name_allowed else [".example.test"]
    settings.AGENT_ALLOWED_NETWORKS = []  # no private, loopback or link-local network is allowed

    with pytest.raises(ConfigRefused) as refused:
        register_endpoint(tenant=tenant, url=url)

    assert refused.value.field == "url" and refused.value.code == "webhook_url_not_allowed"
    assert why in refused.value.message and "would not deliver" in refused.value.message
    assert not WebhookEndpoint.objects.exists()
    assert not AuditEvent.objects.filter(verb=Verb.WEBHOOK_REGISTERED).exists()


def test_a_loopback_endpoint_is_registered_where_the_operator_allowed_loopback(settings, tenant):
    settings.AGENT_ALLOWED_NETWORKS = ["127.0.0.0/8"]

    assert register_endpoint(tenant=tenant, url="https://127.0.0.1:9443/hooks").url.endswith("/hooks")


def test_an_allowed_name_that_does_not_resolve_yet_is_registered(settings, tenant):
    settings.AGENT_ALLOWED_HOSTS = [".example.test"]

    assert register_endpoint(tenant=tenant, url="https://hooks.acme.example.test/in").pk


def test_the_admins_registration_form_says_why_an_endpoint_is_refused(settings, tenant):
    from approvals.models.notifications import WebhookEndpoint

    settings.AGENT_ALLOWED_NETWORKS = []
    author, _ = factories.policy_admins()
    client = factories.verified_client(author)

    response = client.post(
        "/admin/approvals/webhookendpoint/add/",
        {"tenant": tenant.pk, "url": "https://169.254.169.254/latest/meta-data/", "events": []},
    )

    assert response.status_code == 200  # the form again, with the reason on the URL's field
    errors = response.context["adminform"].form.errors
    assert "would not deliver" in errors["url"][0] and "link-local" in errors["url"][0]
    assert not WebhookEndpoint.objects.exists()


# --- credentials in a URL never reach the trail --------------------------------------------------------


def test_credentials_in_an_endpoints_url_are_kept_for_delivery_and_never_written_to_the_trail(
    settings, tenant
):
    from audit.models import AuditEvent, Verb

    settings.AGENT_ALLOWED_HOSTS = ["hooks.example.test"]
    url = "https://hook-user:pw-s3cret@hooks.example.test/in?token=tok-s3cret&tenant=acme#sig-s3cret"

    endpoint = register_endpoint(tenant=tenant, url=url)

    assert endpoint.url == url  # delivery needs them
    recorded = AuditEvent.objects.get(verb=Verb.WEBHOOK_REGISTERED).data
    assert recorded["url"] == "https://REDACTED@hooks.example.test/in?token=REDACTED&tenant=REDACTED#REDACTED"
    for secret in ("hook-user", "pw-s3cret", "tok-s3cret", "sig-s3cret", endpoint.secret):
        assert secret not in str(recorded)
