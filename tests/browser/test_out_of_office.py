"""Out of office and push devices in a real browser, on a phone-sized screen (390 px), by keyboard."""

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from approvals.models.notifications import Delegation
from tests.browser.conftest import screenshot
from tests.browser.test_reviewing import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_person_names_a_delegate_on_a_phone_with_the_keyboard(new_page, tenant, reviewer_a, reviewer_c):
    page = new_page(width=390, height=844)
    sign_in(page, reviewer_a)
    page.goto("/out-of-office/")
    expect(page.get_by_role("heading", name="Out of office", level=1)).to_be_visible()
    start = timezone.now()
    page.get_by_label("Delegate (their username)").fill("reviewer_c")
    page.get_by_label("From (UTC)").fill(start.strftime("%Y-%m-%dT%H:%M"))
    page.get_by_label("Until (UTC)").fill((start + timedelta(days=3)).strftime("%Y-%m-%dT%H:%M"))
    page.get_by_label("Note (optional)").focus()
    page.keyboard.type("holiday")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")  # the submit button, reached by Tab
    expect(page.get_by_role("button", name="End now")).to_be_visible()
    wide = page.evaluate(
        "[...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right > 391)"
        ".map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))"
    )
    assert wide == []  # nothing on the page is wider than the phone (the site menu scrolls on its own)
    screenshot(page, "out-of-office-phone")
    delegation = Delegation.objects.get()
    assert (delegation.delegator, delegation.delegate, delegation.note) == (reviewer_a, reviewer_c, "holiday")


def test_your_devices_shows_the_push_section(new_page, tenant, reviewer_a):
    page = new_page(width=390, height=844)
    sign_in(page, reviewer_a)
    page.goto("/accounts/devices/")
    section = page.locator("#push-devices")
    expect(section.get_by_role("heading", name="Notifications on your phone")).to_be_visible()
    expect(section).to_contain_text("No device gets notifications yet.")
