"""A tenant admin, signed in with her second factor in real Chromium, adds a person to an approver group by
typing part of the username into the membership autocomplete (select2) and picking the suggestion; Django's
permission groups are not on her admin index; and the dry run of a policy version links back to that
version, a link she can follow with the keyboard alone."""

import re

import pytest
from playwright.sync_api import expect

from approvals.services.tenants import grant_admin_site
from tenants.models import GroupMembership
from tests import factories
from tests.browser.conftest import beside_the_browser, screenshot
from tests.factories import totp_code

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _sign_in(page, user, *, next_path="/admin/"):
    """The tenant's admin (role admin, given the admin site) signs in with password and one-time code."""
    page.goto(f"/accounts/login/?next={next_path}")
    page.get_by_label("Username").fill(user.username)
    page.get_by_label("Password").fill(factories.PASSWORD)
    page.get_by_label("One-time code").fill(totp_code(user))
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#site-name")).to_be_visible()


def test_a_tenant_admin_adds_a_group_member_through_the_autocomplete(new_page, tenant, admin_user):
    ops_only = factories.make_user("dana_ops", tenant=tenant, groups=["ops"], first_name="Dana")
    finance = factories.make_group(tenant, "finance")
    assert not GroupMembership.objects.filter(group=finance, user=ops_only).exists()

    beside_the_browser(grant_admin_site, tenant, admin_user)
    page = new_page()
    _sign_in(page, admin_user)
    expect(page.get_by_role("link", name="Approver groups")).to_be_visible()
    expect(page.locator('a[href="/admin/auth/group/"]')).to_have_count(0)
    expect(page.locator("#content-main").get_by_role("link", name="Groups", exact=True)).to_have_count(0)
    screenshot(page, "admin-membership-index")

    page.goto(f"/admin/tenants/approvergroup/{finance.pk}/change/")
    page.locator("#groupmembership_set-group").get_by_role(
        "button", name="Add another Group membership"
    ).click()
    row = page.locator(".dynamic-groupmembership_set").last
    row.locator(".select2-selection").click()
    search = page.locator(".select2-container--open .select2-search__field")
    search.fill("dana")
    # Until the search answers, select2 shows its first page unfiltered (admin, dana_ops): wait for the
    # answer to "dana", which is dana_ops alone.
    suggestions = page.locator(".select2-container--open .select2-results__option")
    expect(suggestions).to_have_text(["dana_ops"])
    suggestion = suggestions.first
    screenshot(page, "admin-membership-autocomplete")
    suggestion.click()
    expect(row.locator(".select2-selection__rendered")).to_contain_text("dana_ops")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    expect(page.locator(".errornote")).to_have_count(0)
    screenshot(page, "admin-membership-saved")

    assert GroupMembership.objects.filter(group=finance, user=ops_only).exists()


def test_the_dry_run_links_back_to_its_version_by_keyboard(new_page, tenant, admin_user, refund_policy):
    version = refund_policy
    beside_the_browser(grant_admin_site, tenant, admin_user)
    page = new_page()
    _sign_in(page, admin_user)
    page.goto(f"/admin/approvals/policyversion/{version.pk}/dry-run/")
    expect(page.locator("#dry-run-summary")).to_be_visible()
    back = page.locator(".dry-run-back a")
    change_path = f"/admin/approvals/policyversion/{version.pk}/change/"
    expect(back).to_have_attribute("href", change_path)
    screenshot(page, "admin-dry-run-back-link")

    for _ in range(60):  # Tab from the top of the page until the link has the focus
        page.keyboard.press("Tab")
        if back.evaluate("element => element === document.activeElement"):
            break
    else:
        pytest.fail("Tab never reached the dry run's link back")
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(re.escape(change_path) + "$"))
    expect(page.get_by_role("heading", name="View policy version")).to_be_visible()
    expect(page.get_by_role("heading", name=str(version))).to_be_visible()
    screenshot(page, "admin-dry-run-back-followed")
