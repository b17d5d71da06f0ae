"""Registrations write no credential into the audit trail. Every registration that takes a secret or a
URL (an agent with its tokens, outbound credentials and card URL; a change of them; new tokens; a
webhook endpoint; a SCIM token; a person's push device, whose endpoint is a capability URL) is made
with recognisable secrets, then every event of the trail is searched for them: its subject and its
data, as they would be exported."""

import json

import pytest

from approvals.services import push_devices
from approvals.services.agents import register_agent, rotate_agent_tokens, update_agent
from approvals.services.webhooks import register_endpoint
from audit.models import AuditEvent, Verb
from sso.models import IdentityProvider
from sso.scim.auth import issue_token
from tests import factories

pytestmark = pytest.mark.django_db


def trail_text() -> str:
    return "\n".join(
        json.dumps({"subject": subject, "data": data}, default=str)
        for subject, data in AuditEvent.objects.values_list("subject", "data")
    )


def test_no_registration_writes_a_secret_into_the_trail(settings, tenant):
    settings.AGENT_ALLOWED_HOSTS = [".example.test"]
    admin, _ = factories.policy_admins()
    secrets = {"card-user", "card-pw-s3cret", "card-query-s3cret", "push-s3cret", "api-s3cret", "out-s3cret"}

    agent = register_agent(
        tenant=tenant,
        slug="refunds",
        name="Refunds",
        card_url="https://card-user:card-pw-s3cret@agents.example.test/card.json?key=card-query-s3cret",
        push_token="push-s3cret",
        api_token="api-s3cret",
        outbound_auth_scheme="bearer",
        outbound_auth_credentials="out-s3cret",
        actor=admin,
    )
    secrets |= {"moved-pw-s3cret", "aud-s3cret", "out-2-s3cret"}
    update_agent(
        agent,
        actor=admin,
        card_url="https://moved:moved-pw-s3cret@agents.example.test/card.json",
        audience="https://agents.example.test/refunds?sig=aud-s3cret",
        outbound_auth_credentials="out-2-s3cret",
    )
    secrets |= set(rotate_agent_tokens(agent, actor=admin))
    endpoint = register_endpoint(
        tenant=tenant,
        url="https://hook-user:hook-pw-s3cret@hooks.example.test/in?token=hook-tok-s3cret",
        actor=admin,
    )
    secrets |= {"hook-user", "hook-pw-s3cret", "hook-tok-s3cret", endpoint.secret}
    provider = IdentityProvider.objects.create(
        tenant=tenant, display_name="Acme IdP", issuer="https://idp.acme.example", client_id="reviewer"
    )
    secrets.add(issue_token(provider))
    reviewer = factories.make_user("reviewer_a", tenant=tenant, groups=["finance"])
    push_devices.subscribe(
        reviewer,
        endpoint="https://dev-user:dev-pw-s3cret@push.example.test/fcm/send/device-capability-s3cret",
        p256dh="BNcRdreALRFXTkOOUHK1EtK2wtaz5Ry4YfYCA_0QTpQtUbVlUls0VJXg7A8u-Ts1XbjhazAkj7I99e8QcYP7DkM",
        auth="tBHItJI5svbpez7KI4CCXg",
        name="Alice's phone",
        refusal=None,
    )
    secrets |= {"dev-user", "dev-pw-s3cret", "device-capability-s3cret", "tBHItJI5svbpez7KI4CCXg"}

    verbs = set(AuditEvent.objects.values_list("verb", flat=True))
    assert {Verb.AGENT_REGISTERED, Verb.AGENT_CHANGED, Verb.WEBHOOK_REGISTERED} <= verbs
    recorded = trail_text()
    assert "agents.example.test" in recorded and "hooks.example.test" in recorded  # the URLs' shapes stay
    assert sorted(secret for secret in secrets if secret in recorded) == []
