"""Administering in real Chromium: the demo's second admin activates a draft in the browser (four eyes), a
signed-in admin is never sent to a sign-in form, members are picked by username, Django's permission
groups stay hidden from tenant admins, and a dry run links back to its draft."""

import io

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from approvals.models import PolicyVersion
from approvals.services.policies import create_policy_version
from tests import factories
from tests.browser.conftest import beside_the_browser, screenshot
from tests.factories import totp_code

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DEMO_PASSWORD = "demo-password-1"


def _seed_demo():
    call_command("seed_demo", "--password", DEMO_PASSWORD, "--quiet", stdout=io.StringIO())


def _sign_in(page, username, *, next_path="/"):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get(username=username)
    page.goto(f"/accounts/login/?next={next_path}")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(DEMO_PASSWORD)
    page.get_by_label("One-time code").fill(totp_code(user))
    page.get_by_role("button", name="Sign in").click()
    return user


def test_the_demos_second_admin_activates_a_draft_in_the_browser(new_page):
    beside_the_browser(_seed_demo)
    from django.contrib.auth import get_user_model

    author = get_user_model().objects.get(username="demo-admin")
    active = PolicyVersion.objects.filter(status="active", policy__slug="refunds").first()
    assert active is not None
    refunds = active.policy
    draft = beside_the_browser(
        create_policy_version,
        refunds,
        {
            "outcome": "require_approval",
            "tool_pattern": "payments.refund",
            "thresholds": [{"group": "finance", "count": 2}],
        },
        actor=author,
    )
    page = new_page()
    _sign_in(page, "demo-admin2", next_path="/admin/")
    expect(page.locator("#site-name")).to_be_visible()
    page.goto(f"/admin/approvals/policyversion/{draft.pk}/change/")
    page.get_by_label("Your one-time code").fill(
        totp_code(get_user_model().objects.get(username="demo-admin2"))
    )
    page.get_by_role("button", name="Approve and activate").click()
    expect(page.locator(".messagelist")).to_contain_text("is now active")
    screenshot(page, "admin-second-admin-activated")
    draft.refresh_from_db()
    assert draft.status == "active"


def test_a_signed_in_person_is_never_sent_to_a_sign_in_form(new_page, tenant, reviewer_a):
    page = new_page()
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill("reviewer_a")
    page.get_by_label("Password").fill(factories.PASSWORD)
    page.get_by_label("One-time code").fill(totp_code(reviewer_a))
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="To decide", level=1)).to_be_visible()
    page.goto("/admin/")
    expect(page.get_by_role("heading", name="No access to the admin", level=1)).to_be_visible()
    expect(page.get_by_label("Password")).to_have_count(0)
    expect(page.get_by_text("You are signed in as reviewer_a")).to_be_visible()
    screenshot(page, "admin-no-access")


def test_a_tenant_admin_sees_approver_groups_and_no_django_groups(new_page, tenant):
    beside_the_browser(_seed_demo)
    page = new_page()
    _sign_in(page, "demo-admin2", next_path="/admin/")
    expect(page.locator("#site-name")).to_be_visible()
    expect(page.get_by_role("link", name="Approver groups")).to_be_visible()
    expect(page.locator('a[href="/admin/auth/group/"]')).to_have_count(0)
    assert page.goto("/admin/auth/group/").status in (403, 404)
    screenshot(page, "admin-groups-hidden")
