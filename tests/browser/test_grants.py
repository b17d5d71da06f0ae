"""Standing grants in real Chromium against Daphne: an approver finds their grant in the list with what
is used and left, and revokes it with a reason by keyboard only; on a phone the list fits the screen and
the revocation works by touch."""

import pytest
from playwright.sync_api import expect

from approvals.models import Grant
from tests.approvals.grant_helpers import active_grant, grant_policy, refund
from tests.browser.conftest import beside_the_browser, screenshot
from tests.browser.test_phone_and_keyboard import PHONE, _assert_fits
from tests.browser.test_reviewing import focus_by_tab, sign_in

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
