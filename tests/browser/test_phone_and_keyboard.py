"""A phone (390 px wide) and the keyboard, in real Chromium: no page scrolls sideways, the decision bar
stays on screen and names the amount, and a decision leaves the focus on its result."""

import pytest
from django.contrib.auth import get_user_model
from django_otp.plugins.otp_totp.models import TOTPDevice
from playwright.sync_api import expect

from approvals.models import Decision
from approvals.services.decisions import consume_decision, record_outcome
from tests import factories
from tests.browser.conftest import beside_the_browser, needs_shared_channel_layer, screenshot
from tests.browser.test_reviewing import sign_in, wait_until_live
from tests.factories import PASSWORD, submit, totp_code

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# A phone as Chromium emulates one: a 390 px screen, touch, and a layout viewport that grows with the page
# (so a page wider than the screen is zoomed out, and a sticky bar can fall below the screen).
PHONE = {"width": 390, "height": 844, "is_mobile": True, "has_touch": True, "device_scale_factor": 2}


def _sideways(page) -> int:
    """How many CSS pixels the page is wider than the phone's screen (0: nothing scrolls sideways)."""
    return page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")


def _widest(page) -> list[str]:
    """The elements that stick out to the right of the screen, for the failure message."""
    return page.evaluate(
        """() => Array.from(document.querySelectorAll('body *'))
            .filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
            .slice(0, 8)
            .map(e => e.tagName + (e.className ? '.' + String(e.className).split(' ')[0] : '') +
                 ' ' + Math.round(e.getBoundingClientRect().right) + 'px')"""
    )


def _assert_fits(page, name: str) -> None:
    screenshot(page, f"phone-{name}")
    assert _sideways(page) == 0, f"{name} scrolls sideways: {_widest(page)}"


def _sign_in_to_admin(page, user) -> None:
    page.goto("/accounts/login/?next=/admin/")
    page.get_by_label("Username").fill(user.get_username())
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_label("One-time code").fill(totp_code(user))
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#site-name, h1").first).to_be_visible()


def test_no_page_scrolls_sideways_on_a_phone(
    new_page, tenant, agent, refund_policy, requester, reviewer_a, admin_user, compliance
):
    proposal = beside_the_browser(submit, agent, action=factories.refund_action(amount="1850.00"))
    page = new_page(**PHONE)
    page.goto("/accounts/login/")
    _assert_fits(page, "login")
    sign_in(page, reviewer_a)
    for name, path in [
        ("queue", "/"),
        ("watching", "/watching/"),
        ("detail", f"/proposals/{proposal.id}/"),
        ("edit", f"/proposals/{proposal.id}/edit"),
        ("devices", "/accounts/devices/"),
    ]:
        page.goto(path)
        _assert_fits(page, name)

    auditor = new_page(**PHONE)
    auditor.goto("/accounts/login/")
    auditor.get_by_label("Username").fill("compliance")
    auditor.get_by_label("Password").fill(PASSWORD)
    auditor.get_by_label("One-time code").fill(totp_code(compliance))
    auditor.get_by_role("button", name="Sign in").click()
    expect(auditor.get_by_role("heading", level=1)).to_be_visible()
    for name, path in [
        ("audit-tenant", f"/audit/{tenant.slug}/"),
        ("audit-events", f"/audit/{tenant.slug}/events/"),
        ("audit-metrics", f"/audit/{tenant.slug}/metrics/"),
        ("audit-evidence", f"/audit/{tenant.slug}/proposals/{proposal.id}/"),
    ]:
        auditor.goto(path)
        _assert_fits(auditor, name)

    operator = get_user_model().objects.create_superuser("operator", "operator@example.test", PASSWORD)
    TOTPDevice.objects.create(user=operator, name="default", confirmed=True)
    admin_page = new_page(**PHONE)
    _sign_in_to_admin(admin_page, operator)
    for name, path in [("admin-index", "/admin/"), ("admin-policies", "/admin/approvals/policy/")]:
        admin_page.goto(path)
        _assert_fits(admin_page, name)


def test_on_a_phone_the_decision_bar_is_on_screen_and_names_the_amount(
    new_page, agent, refund_policy, requester, reviewer_a
):
    proposal = beside_the_browser(submit, agent, action=factories.refund_action(amount="1850.00"))
    page = new_page(**PHONE)
    sign_in(page, reviewer_a)
    page.goto(f"/proposals/{proposal.id}/")
    wait_until_live(page)
    bar = page.get_by_role("region", name="Status and decision, always in view")
    approve = bar.get_by_role("button", name="Approve refund of EUR 1,850.00")
    reject = bar.get_by_role("button", name="Reject refund of EUR 1,850.00")
    # On screen at the top of the page, in the middle and at the bottom: the bar never scrolls away.
    for where in ("0", "document.body.scrollHeight / 2", "document.body.scrollHeight"):
        page.evaluate(f"window.scrollTo(0, {where})")
        expect(approve).to_be_in_viewport(ratio=1)
        expect(reject).to_be_in_viewport(ratio=1)
        assert _sideways(page) == 0
    page.evaluate("window.scrollTo(0, document.body.scrollHeight / 2)")
    viewport = screenshot(page, "phone-decision-bar").with_name("phone-decision-bar-viewport.png")
    page.screenshot(path=str(viewport))


def test_on_a_phone_a_decision_from_the_bar_leaves_the_focus_on_its_result(
    new_page, agent, refund_policy, requester, reviewer_a
):
    proposal = beside_the_browser(submit, agent)
    page = new_page(**PHONE)
    sign_in(page, reviewer_a)
    page.goto(f"/proposals/{proposal.id}/")
    wait_until_live(page)
    page.get_by_label("One-time code").fill(totp_code(reviewer_a))
    bar = page.get_by_role("region", name="Status and decision, always in view")
    bar.get_by_role("button", name="Reject").focus()
    page.get_by_label("Reason").fill("Already refunded by hand")
    bar.get_by_role("button", name="Reject").click()
    result = page.get_by_role("status").filter(has_text="Your rejection is recorded")
    expect(result).to_be_focused()
    expect(result).to_be_in_viewport()
    expect(bar).to_contain_text("Rejected")
    expect(result).to_be_focused()
    screenshot(page, "phone-focus-after-decision")


def test_the_focus_stays_on_the_decision_while_the_agent_acts_on_it(
    new_page, agent, refund_policy, requester, reviewer_a
):
    """In the demo the agent uses a decision at once: two live updates follow the reply (executing, then
    succeeded), each replacing the decision panel under the focus."""
    needs_shared_channel_layer()
    proposal = beside_the_browser(submit, agent)
    page = new_page()
    sign_in(page, reviewer_a)
    page.goto(f"/proposals/{proposal.id}/")
    wait_until_live(page)
    page.get_by_label("One-time code").fill(totp_code(reviewer_a))
    page.get_by_role("button", name="Approve").first.click()
    expect(page.get_by_role("status").filter(has_text="Your approval is recorded.")).to_be_focused()
    decision = Decision.objects.get(proposal=proposal)
    beside_the_browser(consume_decision, agent, decision.jti, rev=decision.rev)
    expect(page.locator("#decision")).to_contain_text("The agent has started the work")
    beside_the_browser(record_outcome, agent, decision.jti, status="succeeded")
    expect(page.locator("#decision")).to_contain_text("The agent reports the work done")
    assert page.evaluate("document.activeElement.closest('#decision') !== null"), page.evaluate(
        "document.activeElement.tagName"
    )
    screenshot(page, "focus-after-the-agent-acted")


def test_on_a_phone_the_queue_filters_are_folded_and_the_first_proposal_is_on_the_first_screen(
    new_page, agent, refund_policy, requester, reviewer_a
):
    proposal = beside_the_browser(submit, agent)
    page = new_page(**PHONE)
    sign_in(page, reviewer_a)
    expect(page.get_by_label("Agent", exact=True)).to_be_hidden()
    expect(page.locator(f"#row-{proposal.id} a.proposal-link")).to_be_in_viewport()
    screenshot(page, "phone-queue-folded")
    page.get_by_text("Filters", exact=True).click()
    expect(page.get_by_label("Agent", exact=True)).to_be_visible()
    # With a filter in use, the filters stay open so the person sees what narrows the list.
    page.get_by_label("Agent", exact=True).select_option(label="Refund Demo")
    page.get_by_role("button", name="Apply filters").click()
    expect(page.get_by_label("Agent", exact=True)).to_be_visible()
    expect(page.get_by_text("(1 in use)")).to_be_visible()


def test_on_a_wide_screen_the_queue_filters_are_open(new_page, agent, refund_policy, requester, reviewer_a):
    page = new_page()
    sign_in(page, reviewer_a)
    expect(page.get_by_label("Agent", exact=True)).to_be_visible()
    expect(page.get_by_text("Filters", exact=True)).to_be_hidden()
