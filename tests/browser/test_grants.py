"""Standing grants in real Chromium against Daphne: an approver finds their grant in the list with what
is used and left, and revokes it with a reason by keyboard only; on a phone the list fits the screen and
the revocation works by touch. A grant request is approved on its page by keyboard; on a phone a call's
page says which grant it did not fit and why, or which grant decided it and what is left."""

import pytest
from playwright.sync_api import expect

from approvals.models import Grant
from tests import factories
from tests.approvals.grant_helpers import active_grant, grant_policy, refund, request_grant
from tests.browser.conftest import beside_the_browser, screenshot
from tests.browser.test_phone_and_keyboard import PHONE, _assert_fits
from tests.browser.test_reviewing import focus_by_tab, sign_in
from tests.factories import totp_code

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def grant(tenant, agent, refund_policy, requester, reviewer_a, reviewer_b):
    beside_the_browser(grant_policy, tenant)
    made = beside_the_browser(active_grant, agent, reviewer_a, reviewer_b)
    beside_the_browser(refund, agent, amount="25.00")
    return made


def test_an_approver_revokes_a_grant_from_the_list_with_the_keyboard(grant, reviewer_a, new_page):
    page = new_page()
    sign_in(page, reviewer_a)
    focus_by_tab(page, "a[href='/grants/']")
    page.keyboard.press("Enter")

    mine = page.get_by_role("region", name="Your grants: 1")
    expect(mine).to_contain_text("1 of 30 used, 29 left")
    expect(mine).to_contain_text("EUR 575.00 left")
    screenshot(page, "grants-list")
    focus_by_tab(page, f"#grant-{grant.id}-reason")
    page.keyboard.type("The outage is over; refunds go back to review.")
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Revoke this grant")).to_be_focused()
    page.keyboard.press("Enter")

    expect(page.get_by_role("status")).to_contain_text("The grant is revoked")
    expect(mine).to_contain_text("Revoked")
    expect(mine).to_contain_text("The outage is over")
    assert beside_the_browser(lambda: Grant.objects.get(pk=grant.pk).state) == Grant.State.REVOKED
    screenshot(page, "grants-revoked")


def test_revoking_without_a_reason_says_so_next_to_the_field(grant, reviewer_a, new_page):
    page = new_page()
    sign_in(page, reviewer_a)
    page.goto("/grants/")
    page.get_by_role("button", name="Revoke this grant").first.click()

    expect(page.locator(".field__error")).to_contain_text("a revocation needs a reason")
    assert beside_the_browser(lambda: Grant.objects.get(pk=grant.pk).state) == Grant.State.ACTIVE


def test_on_a_phone_the_grants_list_fits_and_revokes_by_touch(grant, reviewer_a, new_page):
    page = new_page(**PHONE)
    sign_in(page, reviewer_a)
    page.goto("/grants/")
    _assert_fits(page, "grants")
    page.get_by_label("Why revoke it").first.tap()
    page.get_by_label("Why revoke it").first.fill("Stop")
    page.get_by_role("button", name="Revoke this grant").first.tap()

    expect(page.get_by_role("status")).to_contain_text("The grant is revoked")
    _assert_fits(page, "grants-revoked")


def test_an_approver_approves_a_grant_request_on_its_page_with_the_keyboard(
    tenant, agent, refund_policy, requester, reviewer_a, reviewer_b, new_page
):
    beside_the_browser(grant_policy, tenant)
    asked = beside_the_browser(request_grant, agent)
    beside_the_browser(factories.vote, asked, reviewer_b)  # the first of the two approvals
    page = new_page()
    sign_in(page, reviewer_a)
    focus_by_tab(page, f'a[href="/proposals/{asked.id}/"]')
    page.keyboard.press("Enter")

    expect(page.get_by_text("This asks for a standing grant")).to_be_visible()
    expect(page.locator("main")).to_contain_text("payments.refund")
    screenshot(page, "grant-request")
    focus_by_tab(page, "#id_otp_code")
    page.keyboard.type(totp_code(reviewer_a))
    focus_by_tab(page, 'button[value="approve"]')
    page.keyboard.press("Enter")

    expect(page.get_by_text("Your approval is recorded.")).to_be_visible()
    assert beside_the_browser(lambda: Grant.objects.get(proposal=asked).state) == Grant.State.ACTIVE


def test_on_a_phone_a_call_the_grant_does_not_cover_says_which_grant_and_why(
    grant, agent, reviewer_a, new_page
):
    missed = beside_the_browser(refund, agent, amount="80.00")
    fitted = beside_the_browser(refund, agent, amount="25.00")
    page = new_page(**PHONE)
    sign_in(page, reviewer_a)

    page.goto(f"/proposals/{missed.id}/")
    expect(page.get_by_text("Not covered by a standing grant")).to_be_visible()
    expect(page.locator("main")).to_contain_text("its condition does not hold for these arguments")
    expect(page.locator("main")).to_contain_text(str(grant.id)[:8])
    _assert_fits(page, "grant-missed")

    page.goto(f"/proposals/{fitted.id}/")
    expect(page.get_by_text("Decided under a standing grant")).to_be_visible()
    expect(page.locator("main")).to_contain_text("Left after it: 28 uses, EUR 550.00")
    _assert_fits(page, "grant-used")
