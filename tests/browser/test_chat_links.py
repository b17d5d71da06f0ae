"""Linking a Teams user to a Reviewer person, in real Chromium: the one-time link the bot offers opens a
page that names the Teams user, the person confirms it signed in with their own factor, and the link
works once. And the adapter's refund that chat messages describe reads, on its page, with the currency
and the target spelling every notification line uses ("Refund EUR 22.00 · order:7002")."""

import pytest
from playwright.sync_api import expect

from approvals.models.notifications import TeamsBot, TeamsIdentity
from approvals.services.teams_links import offer_teams_link
from tests import factories
from tests.approvals.test_headline import langgraph_fields
from tests.browser.conftest import beside_the_browser, screenshot
from tests.browser.test_reviewing import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _offer(tenant) -> str:
    bot = TeamsBot.objects.create(
        tenant=tenant,
        app_id="00000000-0000-4000-8000-00000000b07a",
        app_password_ref="env:TEAMS_BOT_PASSWORD_ACME",
        service_url="https://smba.trafficmanager.net/emea/",
    )
    return offer_teams_link(bot, "aad-alice")


def test_a_person_links_their_teams_user_once(new_page, tenant, reviewer_a):
    token = beside_the_browser(_offer, tenant)
    page = new_page()
    sign_in(page, reviewer_a)
    page.goto(f"/teams/link/{token}/")
    expect(page.get_by_role("heading", name="Link your Teams account")).to_be_visible()
    expect(page.locator("main")).to_contain_text("Teams user aad-alice")
    screenshot(page, "teams-link-offer")
    page.get_by_role("button", name="Link this Teams user to me").click()
    expect(page.get_by_role("status")).to_contain_text(
        "Linked: Teams user aad-alice now acts as you in Teams"
    )
    screenshot(page, "teams-link-confirmed")
    assert (
        beside_the_browser(lambda: TeamsIdentity.objects.get(aad_object_id="aad-alice").user_id)
        == reviewer_a.pk
    )
    page.goto(f"/teams/link/{token}/")
    expect(page.get_by_role("alert")).to_contain_text("This link is used, expired or unknown")


def test_an_adapters_refund_reads_with_its_currency_as_in_the_chat_messages(
    new_page, agent, refund_policy, requester, reviewer_a
):
    built = langgraph_fields()
    proposal = beside_the_browser(
        factories.submit,
        agent,
        action=built["action"],
        summary=built["summary"],
        consequences=built["consequences"],
    )
    page = new_page()
    sign_in(page, reviewer_a)
    page.goto(f"/proposals/{proposal.id}/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Refund EUR 22.00 · order:7002")
    expect(page.locator(".headline__currency")).to_contain_text("not part of the approved action")
    screenshot(page, "adapter-refund-currency")
