"""Passkeys in a real browser: Chromium's virtual authenticator (CDP WebAuthn domain) stands in for the
person's device. A reviewer confirms with a code and adds a passkey under Your devices, signs in with it
instead of a code, is refused on a proposal whose policy says step_up "passkey" while the passkey is new,
and approves it once an admin vouched for the passkey; the signed decision says so.

WebAuthn needs a secure context and a relying party id that is a host name: the pages are opened at
http://localhost:<port>, which is the development default (WEBAUTHN_RP_ID "localhost", origin
http://localhost:<port of REVIEWER_ISSUER>) of the Daphne these tests start.
"""

import jwt
import pytest
from django_otp_webauthn.models import WebAuthnCredential
from playwright.sync_api import expect

from accounts.devices import vouch_for_new_passkeys
from approvals.models import Decision, Proposal, Vote
from approvals.states import State
from tests import factories
from tests.browser.conftest import beside_the_browser, screenshot
from tests.factories import PASSWORD, submit, totp_code

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def localhost_page(browser, live_server_url):
    """A page at http://localhost:<port> with a virtual platform authenticator (user verification on)."""
    expect.set_options(timeout=10_000)
    context = browser.new_context(
        base_url=live_server_url.replace("127.0.0.1", "localhost"), viewport={"width": 1280, "height": 900}
    )
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("WebAuthn.enable")
    cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
                "automaticPresenceSimulation": True,
            }
        },
    )
    yield page
    context.close()


def test_a_reviewer_adds_a_passkey_signs_in_with_it_and_approves_a_passkey_policy(
    localhost_page, tenant, agent, requester, reviewer_a
):
    factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        step_up="passkey",
        thresholds=[{"group": "finance", "count": 1}],
    )
    page = localhost_page

    # Signed in with the current factor (the authenticator app), the reviewer adds a passkey.
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill("reviewer_a")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_label("One-time code").fill(totp_code(reviewer_a))
    page.get_by_role("button", name="Sign in", exact=True).click()
    expect(page.get_by_role("heading", name="To decide", level=1)).to_be_visible()
    page.get_by_role("link", name="Your devices").click()
    # Being signed in is not enough to add a factor: the page asks for a fresh code first.
    expect(page.locator("#confirm")).to_contain_text("being signed in is not enough")
    page.get_by_label("Code from your authenticator app (or a backup code)").fill(totp_code(reviewer_a))
    page.get_by_role("button", name="Confirm with the code").click()
    expect(page.locator("#confirm")).to_contain_text("Confirmed with a code from your authenticator app")
    page.get_by_label("Name of the new passkey").fill("Work laptop")
    page.get_by_role("button", name="Add a passkey").click()
    expect(page.get_by_text("Your passkey “Work laptop” is registered.")).to_be_visible()
    expect(page.get_by_role("list", name="Your passkeys")).to_contain_text("Work laptop")
    screenshot(page, "passkey-devices")
    assert WebAuthnCredential.objects.get(user=reviewer_a).name == "Work laptop"

    # Signed out, the reviewer signs in again with the password and the passkey (no code).
    page.get_by_role("button", name="Sign out").click()
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill("reviewer_a")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Use a passkey instead of a code").click()
    expect(page.get_by_role("heading", name="To decide", level=1)).to_be_visible()

    # The page says before any button is pressed that this policy needs the passkey; Approve asks for it.
    proposal = beside_the_browser(submit, agent, summary="Refund EUR 40.00 to order 1182")
    page.goto(f"/proposals/{proposal.id}/")
    expect(page.locator("#passkey-note")).to_contain_text("This policy needs your passkey")
    expect(page.get_by_label("One-time code")).to_have_count(0)
    page.get_by_label("Reason").fill("Matches the support ticket")
    screenshot(page, "passkey-vote")
    # The passkey is new: a passkey-only policy refuses it, and says why and what to do.
    page.locator("#decision").get_by_role("button", name="Approve").click()
    expect(page.locator("#decision")).to_contain_text("needs a passkey you have had longer")
    assert not Vote.objects.filter(proposal=proposal).exists()

    # A tenant admin, who asked the reviewer on the phone, vouches for it: now it is accepted.
    admin = beside_the_browser(factories.make_user, "dana", tenant=tenant, role="admin", groups=["admins"])
    beside_the_browser(vouch_for_new_passkeys, reviewer_a, actor=admin, reason="asked her by phone")
    page.get_by_label("Reason").fill("Matches the support ticket")
    page.locator("#decision").get_by_role("button", name="Approve").click()
    expect(page.get_by_text("Your approval is recorded.")).to_be_visible()
    screenshot(page, "passkey-approved")

    assert Proposal.objects.get(pk=proposal.pk).state == State.APPROVED
    assert Vote.objects.get(proposal=proposal).auth_method == "passkey"
    claims = jwt.decode(Decision.objects.get(proposal=proposal).token, options={"verify_signature": False})
    assert [approver["auth"]["method"] for approver in claims["approvers"]] == ["passkey"]

    # Vouched for, the passkey is the strongest factor: Your devices asks for it before any change.
    page.goto("/accounts/devices/")
    expect(page.locator("#confirm")).to_contain_text("confirm with one of your passkeys first")
    page.locator("#confirm").get_by_role("button", name="Confirm with a passkey").click()
    expect(page.locator("#confirm")).to_contain_text("Confirmed with one of your passkeys")
