"""Single sign-on from provisioning to deprovisioning, in real Chromium against Daphne, with a real OpenID
Connect provider on loopback (tests/sso/oidc_idp: django-oauth-toolkit, standing in for the company's
IdP) and SCIM driven by scim2-client over HTTP the way Okta calls it: a person provisioned into a group
signs in at the provider, sees that group's queue, approves with a fresh sign-in at the provider, and is
deactivated: the open page closes and says so, the next request is refused, and the audit trail shows
every step."""

import re

import httpx2
import jwt
import pytest
from playwright.sync_api import expect
from scim2_client.engines.httpx2 import SyncSCIMClient
from scim2_models import SearchRequest

from approvals.models import Decision, Vote
from audit.labels import actor_label
from audit.models import AuditEvent, Verb
from sso.models import IdentityProvider
from sso.scim.auth import issue_token
from tenants.models import ProviderGroupMapping, TenantMembership
from tests import factories
from tests.browser.conftest import beside_the_browser, screenshot
from tests.browser.test_reviewing import wait_until_live
from tests.factories import PASSWORD, submit, totp_code
from tests.sso.oidc_idp.harness import OidcProvider

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CLIENT_ID, CLIENT_SECRET = "reviewer-browser", "reviewer-browser-client-secret-of-32-bytes"
ACR, AMR = "urn:acme:mfa", ["pwd", "otp"]
IDP_PASSWORD = "idp-password"
OPS_ACTION = {"tool": "ops.restart", "arguments": {"service": "api"}, "target": "service:api"}


@pytest.fixture(scope="module")
def provider_process(live_server_url):
    idp = OidcProvider().start(timeout=120)  # beside Daphne and Chromium: a loaded machine starts it slowly
    idp.add_client(CLIENT_ID, CLIENT_SECRET, [f"{live_server_url}/accounts/sso/callback"])
    yield idp
    idp.stop()


@pytest.fixture
def acme_provider(tenant, provider_process, tmp_path):
    secret = tmp_path / "client-secret"
    secret.write_text(CLIENT_SECRET)
    return IdentityProvider.objects.create(
        tenant=tenant,
        display_name="Acme IdP",
        issuer=provider_process.issuer,
        client_id=CLIENT_ID,
        client_secret_file=str(secret),
        allowed_email_domains="acme.example",
        create_users=False,  # only the people SCIM provisioned sign in
        step_up="idp",
        step_up_acr=ACR,
        step_up_amr=" ".join(AMR),
    )


def okta(live_server_url, token) -> SyncSCIMClient:
    """scim2-client over HTTP to Daphne, with the tenant's bearer token, as the provisioning service."""
    client = SyncSCIMClient(
        httpx2.Client(base_url=f"{live_server_url}/scim/v2", headers={"Authorization": f"Bearer {token}"})
    )
    client.discover()
    return client


def provision(scim, subject) -> tuple[str, str]:
    """Okta's calls for a new assignment: look the person up by userName, create them, push the group
    with them in it. Returns (the person's SCIM id, the group's)."""
    user_model, group_model = scim.get_resource_model("User"), scim.get_resource_model("Group")
    # scim2-models parses a filter given as a string (its type names only the parsed filter).
    found = scim.query(
        user_model,
        query_parameters=SearchRequest(filter='userName eq "uma@acme.example"'),  # type: ignore[arg-type]
    )
    assert found.total_results == 0
    person = scim.create(
        user_model.model_validate(
            {
                "userName": "uma@acme.example",
                "externalId": subject,  # Okta's user id: the `sub` of its ID tokens
                "name": {"givenName": "Uma", "familyName": "Urquhart"},
                "emails": [{"value": "uma@acme.example", "primary": True, "type": "work"}],
                "active": True,
            }
        )
    )
    group = scim.create(group_model.model_validate({"displayName": "Payments approvers", "members": []}))
    scim.modify(
        group_model,
        group.id,
        {
            "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
            "Operations": [{"op": "add", "path": "members", "value": [{"value": person.id}]}],
        },
        check_request_payload=False,
    )
    return person.id, group.id


def deactivate(scim, person_id) -> None:
    """Okta's unassignment: PATCH active false."""
    scim.modify(
        scim.get_resource_model("User"),
        person_id,
        {
            "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
            "Operations": [{"op": "replace", "value": {"active": False}}],
        },
        check_request_payload=False,
    )


def sign_in_at_provider(page):
    """The provider's own sign-in form (a page of the provider's origin)."""
    expect(page.get_by_role("heading", name="Test identity provider")).to_be_visible()
    page.get_by_label("Username").fill("uma")
    page.get_by_label("Password").fill(IDP_PASSWORD)
    page.get_by_role("button", name="Sign in at the provider").click()


def test_a_provisioned_person_signs_in_approves_with_a_fresh_sign_in_and_is_deprovisioned(
    new_page,
    live_server_url,
    provider_process,
    acme_provider,
    tenant,
    agent,
    refund_policy,
    requester,
    compliance,
):
    finance = factories.make_group(tenant, "finance")
    ProviderGroupMapping.objects.create(tenant=tenant, external_name="Payments approvers", group=finance)
    factories.make_policy(
        tenant, "restarts", tool_pattern="ops.restart", thresholds=[{"group": "ops", "count": 1}]
    )
    refund = beside_the_browser(submit, agent, summary="Refund EUR 40.00 to order 1182")
    restart = beside_the_browser(submit, agent, action=OPS_ACTION, summary="Restart the API service")
    subject = provider_process.add_user(
        "uma", email="uma@acme.example", password=IDP_PASSWORD, acr=ACR, amr=AMR
    )
    scim = okta(live_server_url, issue_token(acme_provider))
    person_id, _ = beside_the_browser(provision, scim, subject)

    # Signs in through the provider and sees the finance group's proposal, not the ops one.
    page = new_page()
    page.goto("/accounts/sso/acme/")
    sign_in_at_provider(page)
    expect(page.get_by_role("heading", name="To decide", level=1)).to_be_visible()
    wait_until_live(page)
    expect(page.locator(f'a[href="/proposals/{refund.id}/"]')).to_be_visible()
    expect(page.locator(f'a[href="/proposals/{restart.id}/"]')).to_have_count(0)
    expect(page.locator("#queue-count")).to_have_text("1 proposal waiting for you")
    screenshot(page, "sso-queue")

    # The sign-in does not confirm the vote: the page offers a fresh sign-in at the provider.
    page.locator(f'a[href="/proposals/{refund.id}/"]').first.click()
    wait_until_live(page)
    confirm = page.get_by_role("link", name="Confirm at Acme IdP")
    expect(confirm).to_be_visible()
    confirm.click()
    sign_in_at_provider(page)  # prompt=login: the provider asks again although its session is open
    expect(page.locator("#provider-step-up")).to_contain_text("Confirmed at Acme IdP for this version")
    wait_until_live(page)
    screenshot(page, "sso-confirmed-at-provider")
    page.locator("#decision button[value=approve]").click()
    expect(page.locator("#decision")).to_contain_text("Your approval is recorded.")
    expect(page.locator("#h-consequence")).to_have_text("Approved: the agent may now do this")

    vote = Vote.objects.select_related("voter").get(proposal=refund)
    assert (vote.auth_method, vote.auth_detail) == ("idp", {"acr": ACR, "amr": AMR})
    claims = jwt.decode(Decision.objects.get(proposal=refund).token, options={"verify_signature": False})
    assert claims["approvers"][0]["auth"]["method"] == "idp" and claims["approvers"][0]["auth"]["amr"] == AMR

    # Deactivated by SCIM while the page is open: the page's socket closes and the page says so.
    beside_the_browser(deactivate, scim, person_id)
    status = page.locator("[data-live-status]")
    expect(status).to_have_attribute("data-state", "ended")
    expect(status).to_contain_text("you no longer have access here")
    screenshot(page, "sso-deprovisioned-page")

    # Their next request is refused: back to the sign-in page, signed out.
    page.reload()
    expect(page.get_by_role("heading", name="Sign in", level=1)).to_be_visible()
    assert re.search(r"/accounts/login/", page.url)
    assert not TenantMembership.objects.filter(user=vote.voter).exists()

    # The audit trail has each step, in order.
    steps = [
        (Verb.PERSON_PROVISIONED, "scim:acme"),
        (Verb.GROUP_MEMBER_ADDED, None),
        (Verb.SSO_SIGNED_IN, None),
        (Verb.VOTE_CAST, actor_label(vote.voter)),
        (Verb.GROUP_MEMBER_REMOVED, None),  # deprovisioning: out of the group first, then the record
        (Verb.PERSON_DEPROVISIONED, "scim:acme"),
    ]
    uma = actor_label(vote.voter)  # the person's pseudonym in the trail
    trail = list(AuditEvent.objects.filter(chain=f"tenant:{tenant.id}").order_by("id"))
    positions = []
    for verb, actor in steps:
        matches = [
            index
            for index, event in enumerate(trail)
            if event.verb == verb
            and (actor is None or event.actor == actor)
            and (not verb.startswith("group.") or event.data == {"group": "finance", "user": uma})
        ]
        assert matches, f"no {verb} in the trail"
        positions.append(matches[0])
    assert positions == sorted(positions), [(steps[i][0], p) for i, p in enumerate(positions)]
    cast = next(e for e in trail if e.verb == Verb.VOTE_CAST)
    assert cast.data["auth"]["method"] == "idp" and cast.data["auth"]["acr"] == ACR

    # Compliance staff read the same steps in the audit trail's pages.
    auditor = new_page()
    auditor.goto("/accounts/login/")
    auditor.get_by_label("Username").fill(compliance.get_username())
    auditor.get_by_label("Password").fill(PASSWORD)
    auditor.get_by_label("One-time code").fill(totp_code(compliance))
    auditor.get_by_role("button", name="Sign in").click()
    auditor.goto("/audit/acme/events/")
    events = auditor.locator("table")
    for verb, _ in steps:
        expect(events).to_contain_text(verb)
    screenshot(auditor, "sso-audit-trail")
