"""Every person asked to decide sees a way to the factor that confirms a vote: someone with no
authenticator app and no passkey (signed in through the company's provider, never enrolled) is led to
Your devices instead of a code field they cannot fill, and "Confirm at <provider>" is offered only to
people who have an identity at that provider."""

import pytest
from django.test import Client
from django.urls import reverse
from django_otp import DEVICE_ID_SESSION_KEY

from sso.models import ExternalIdentity, IdentityProvider, IdentityProviderDevice
from tests import factories
from tests.factories import submit, verified_client

pytestmark = pytest.mark.django_db

DEVICES = reverse("accounts:devices")


@pytest.fixture
def proposal(agent, refund_policy, requester):
    return submit(agent)


@pytest.fixture
def provider(tenant):
    return IdentityProvider.objects.create(
        tenant=tenant,
        display_name="Acme IdP",
        issuer="https://idp.acme.example",
        client_id="reviewer",
        allowed_email_domains="acme.example",
    )


def signed_in_through_provider(user) -> Client:
    """A session the provider verified (its device answers no code), as the sign-in callback leaves it."""
    device = IdentityProviderDevice.objects.create(user=user, name="Acme IdP", confirmed=True)
    client = Client()
    client.force_login(user)
    session = client.session
    session[DEVICE_ID_SESSION_KEY] = device.persistent_id
    session.save()
    return client


def decision_panel(client, proposal) -> str:
    response = client.get(reverse("approvals:detail", kwargs={"proposal_id": proposal.id}))
    assert response.status_code == 200
    html = response.content.decode()
    return html[html.index('<section id="decision"') :].split("</section>", 1)[0]


def test_a_person_without_an_authenticator_or_passkey_is_led_to_set_one_up(tenant, proposal):
    uma = factories.make_user("uma", tenant=tenant, groups=["finance"], totp=False)
    panel = decision_panel(signed_in_through_provider(uma), proposal)
    assert "you have no authenticator app or passkey yet" in panel
    assert f'href="{DEVICES}"' in panel
    assert 'name="otp_code"' not in panel and 'name="action" value="approve"' in panel
    edit = signed_in_through_provider(uma).get(reverse("approvals:edit", kwargs={"proposal_id": proposal.id}))
    assert "no authenticator app or passkey yet" in edit.content.decode()


def test_a_person_with_an_authenticator_gets_the_code_field_and_no_set_up_note(proposal, reviewer_a):
    panel = decision_panel(verified_client(reviewer_a), proposal)
    assert 'name="otp_code"' in panel
    assert 'id="factor-note"' not in panel and f'href="{DEVICES}"' not in panel


def test_confirm_at_the_provider_is_offered_only_to_people_with_an_identity_there(
    tenant, provider, proposal, reviewer_a
):
    provider.step_up = IdentityProvider.StepUp.IDP
    provider.save(update_fields=["step_up"])
    # A local account, with an authenticator but no identity at the provider: the code, no "Confirm at".
    local = decision_panel(verified_client(reviewer_a), proposal)
    assert "Confirm at Acme IdP" not in local and 'name="otp_code"' in local
    # A person who signs in there, and has no factor of Reviewer's own: "Confirm at", and the way to one.
    uma = factories.make_user("uma", tenant=tenant, groups=["finance"], totp=False)
    ExternalIdentity.objects.create(provider=provider, issuer=provider.issuer, subject="uma-1", user=uma)
    theirs = decision_panel(signed_in_through_provider(uma), proposal)
    assert "Confirm at Acme IdP" in theirs
    assert "Or use a one-time code below" not in theirs and 'name="otp_code"' not in theirs
    assert f'href="{DEVICES}"' in theirs
