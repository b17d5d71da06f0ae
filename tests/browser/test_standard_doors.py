"""A TAC challenge and a CIBA request, each approved by a reviewer in Chromium: the page shows the
resource's authorization detail as the consequence (and CIBA's binding message beside it, escaped),
and the door then answers the decision token carrying the approved `authorization_details`."""

import json

import jwt
import pytest
from django.conf import settings
from playwright.sync_api import expect

from approvals.models import Proposal
from oauth.ciba.grant import redeem, start
from oauth.services import register_resource
from oauth.tac.services import accept_challenge, poll
from tests import factories
from tests.browser.conftest import beside_the_browser, screenshot
from tests.factories import PASSWORD, totp_code
from tests.oauth.challenges import REFUND_DETAIL, RESOURCE_AUDIENCE, ChallengeKey, challenge_claims

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def doors(tenant, refund_policy, requester):
    key = ChallengeKey()
    register_resource(
        tenant=tenant,
        slug="refunds-api",
        name="Refunds API",
        audience=RESOURCE_AUDIENCE,
        jwks=key.public_jwk(),
        types={"refund": "payments.refund"},
        api_token="resource-secret",
    )
    bot = factories.make_agent(
        tenant, "refund-bot", card_url="", api_token="bot-secret", push_token="bot-push"
    )
    return key, bot


def approve_in_the_browser(page, user, proposal: Proposal, *, shows: list[str]) -> None:
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(user.get_username())
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_label("One-time code").fill(totp_code(user))
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="To decide", level=1)).to_be_visible()
    page.goto(f"/proposals/{proposal.id}/")
    expect(page.get_by_role("heading", name="If this is approved")).to_be_visible()
    for text in shows:
        expect(page.locator("main")).to_contain_text(text)
    page.locator("#id_otp_code").fill(totp_code(user))
    page.locator('button[value="approve"]').first.click()
    expect(page.get_by_text("Your approval is recorded.")).to_be_visible()


def test_a_reviewer_approves_a_tac_challenge_and_the_agent_gets_the_token(new_page, doors, reviewer_a):
    key, bot = doors
    accepted = beside_the_browser(accept_challenge, bot, key.sign(challenge_claims(settings.REVIEWER_ISSUER)))
    proposal = Proposal.objects.get()
    page = new_page()

    shows = ["740.00", "Refunds over EUR 500 need two people"]
    approve_in_the_browser(page, reviewer_a, proposal, shows=shows)
    screenshot(page, "tac-approved")

    answer = beside_the_browser(poll, bot, str(accepted.transaction.id))
    claims = jwt.decode(answer["access_token"], options={"verify_signature": False})
    assert claims["aud"] == RESOURCE_AUDIENCE and claims["authorization_details"] == [REFUND_DETAIL]


def test_a_reviewer_approves_a_ciba_request_seeing_its_binding_message(new_page, doors, reviewer_b):
    _, bot = doors
    form = {
        "scope": "openid",
        "login_hint": "requester",
        "binding_message": "<b>code K7Q2</b>",
        "authorization_details": json.dumps([REFUND_DETAIL]),
    }
    started = beside_the_browser(start, bot, form)
    proposal = Proposal.objects.get()
    page = new_page()

    approve_in_the_browser(page, reviewer_b, proposal, shows=["<b>code K7Q2</b>", "740.00"])
    expect(page.locator("main b", has_text="code K7Q2")).to_have_count(0)  # shown as text, not markup
    screenshot(page, "ciba-approved")

    grant = {"grant_type": "urn:openid:params:grant-type:ciba", "auth_req_id": str(started.request.id)}
    answer = beside_the_browser(redeem, bot, grant)
    assert answer["authorization_details"] == [REFUND_DETAIL]
