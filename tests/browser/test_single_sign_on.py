"""The whole of single sign-on in Chromium, against the loopback OpenID Connect provider
(tests/sso/oidc_idp: django-oauth-toolkit's OIDC mode, standing in for Okta or Entra ID, which this machine
cannot reach) and Reviewer's SCIM endpoints called over HTTP as a provisioning service calls them.

A person provisioned by SCIM into a group signs in through the provider, sees that group's proposal in
their queue, approves it with a fresh sign-in at the provider, and is deactivated by SCIM: their open page
loses its live connection, their next request goes to the sign-in page, and the audit trail has each step.
"""

import httpx
import jwt
import pytest
from playwright.sync_api import expect

from approvals.models import Decision
from audit.models import AuditEvent, Verb
from sso.models import IdentityProvider
from sso.scim_auth import issue_token
from tenants.models import ProviderGroupMapping
from tests import factories
from tests.browser.conftest import beside_the_browser, screenshot
from tests.factories import submit
from tests.sso.oidc_idp.harness import OidcProvider

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"


@pytest.fixture(scope="module")
def provider_on_loopback():
    idp = OidcProvider().start()
    yield idp
    idp.stop()


def scim(live_server_url, token, method, path, body=None):
    answer = httpx.request(
        method,
        f"{live_server_url}/scim/v2/{path}",
        json=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/scim+json"},
    )
    assert answer.status_code < 300, answer.text
    return answer.json() if answer.content else None


def test_provisioned_signed_in_approving_and_deprovisioned(
    new_page, live_server_url, provider_on_loopback, tmp_path, tenant, agent, refund_policy, requester
):
    idp = provider_on_loopback
    idp.add_client(
        "reviewer", "browser-test-client-secret-32-bytes-long", [f"{live_server_url}/accounts/sso/callback"]
    )
    secret_file = tmp_path / "client-secret"
    secret_file.write_text("browser-test-client-secret-32-bytes-long")
    provider = IdentityProvider.objects.create(
        tenant=tenant,
        display_name="Acme IdP",
        issuer=idp.issuer,
        client_id="reviewer",
        client_secret_file=str(secret_file),
        allowed_email_domains="acme.example",
        groups_claim="",  # groups come from SCIM here
        step_up="idp",
        step_up_acr="urn:acme:mfa",
        step_up_amr="pwd otp",
    )
    ProviderGroupMapping.objects.create(
        tenant=tenant, external_name="Payments approvers", group=factories.make_group(tenant, "finance")
    )
    token = issue_token(provider)
    subject = idp.add_user("yara", email="yara@acme.example", acr="urn:acme:mfa", amr=["pwd", "otp"])

    # Provisioned by SCIM, as Okta does: the user (externalId = the provider's subject), then the group.
    person = scim(
        live_server_url,
        token,
        "POST",
        "Users",
        {
            "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
            "userName": "yara@acme.example",
            "externalId": subject,
            "name": {"givenName": "Yara", "familyName": "Y"},
            "emails": [{"value": "yara@acme.example", "primary": True}],
            "active": True,
        },
    )
    scim(
        live_server_url,
        token,
        "POST",
        "Groups",
        {
            "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"],
            "displayName": "Payments approvers",
            "members": [{"value": person["id"]}],
        },
    )
    proposal = beside_the_browser(submit, agent, summary="Refund EUR 40.00 to order 1182")

    # Signs in through the provider and sees the finance proposal.
    page = new_page()
    page.goto("/accounts/login/")
    page.get_by_role("link", name="Sign in with single sign-on").click()
    page.get_by_label("Your work e-mail or your organisation's short name").fill("yara@acme.example")
    page.get_by_role("button", name="Continue to your provider").click()
    page.get_by_role("link", name="Continue to Acme IdP").click()
    page.get_by_label("Username").fill("yara")
    page.get_by_label("Password").fill("idp-password")
    page.get_by_role("button", name="Sign in at the provider").click()
    expect(page.get_by_role("heading", name="To decide", level=1)).to_be_visible()
    expect(page.locator(f'a[href="/proposals/{proposal.id}/"]')).to_be_visible()
    screenshot(page, "sso-queue")

    # Approves with a fresh sign-in at the provider for this proposal.
    page.locator(f'a[href="/proposals/{proposal.id}/"]').first.click()
    page.get_by_role("link", name="confirm at Acme IdP").click()
    page.get_by_label("Username").fill("yara")
    page.get_by_label("Password").fill("idp-password")
    page.get_by_role("button", name="Sign in at the provider").click()
    expect(page.get_by_text("Confirmed at Acme IdP for this version")).to_be_visible()
    expect(page.locator("[data-live-status]")).to_have_attribute("data-state", "live")
    page.locator('button[value="approve"]').first.click()
    expect(page.get_by_text("Your approval is recorded.")).to_be_visible()
    screenshot(page, "sso-approved")
    claims = jwt.decode(Decision.objects.get(proposal=proposal).token, options={"verify_signature": False})
    assert claims["approvers"][0]["auth"]["method"] == "idp"
    assert claims["approvers"][0]["auth"]["amr"] == ["pwd", "otp"]

    # Deactivated by SCIM: the open page loses its live connection, the next request is refused.
    scim(
        live_server_url,
        token,
        "PATCH",
        f"Users/{person['id']}",
        {"schemas": [PATCH], "Operations": [{"op": "replace", "value": {"active": False}}]},
    )
    expect(page.locator("[data-live-status]")).to_have_attribute("data-state", "down")
    page.reload()
    expect(page.get_by_role("heading", name="Sign in", level=1)).to_be_visible()
    screenshot(page, "sso-deprovisioned")

    verbs = set(AuditEvent.objects.filter(chain=f"tenant:{tenant.id}").values_list("verb", flat=True))
    for verb in (
        Verb.PERSON_PROVISIONED,
        Verb.SCIM_GROUP_CHANGED,
        Verb.GROUP_MEMBER_ADDED,
        Verb.SSO_SIGNED_IN,
        Verb.VOTE_CAST,
        Verb.DECISION_SIGNED,
        Verb.PERSON_DEPROVISIONED,
        Verb.GROUP_MEMBER_REMOVED,
    ):
        assert verb in verbs, verb
