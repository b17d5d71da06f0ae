"""Break-glass in real Chromium against Daphne: a named person breaks glass with the keyboard (reason,
code, confirmation), the page shows the release live, and another person does the post-hoc review from
their queue."""

import pytest
from playwright.sync_api import expect

from approvals.models import PostHocReview
from tests import factories
from tests.browser.conftest import beside_the_browser, screenshot
from tests.browser.test_reviewing import focus_by_tab, live_section, sign_in, wait_until_live
from tests.factories import submit, totp_code

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

RULE = {
    "people": ["reviewer_a"],
    "per_week": 3,
    "amount_cap": "500.00",
    "currency": "EUR",
    "review_hours": 24,
}


def test_a_named_person_breaks_glass_and_another_reviews_it_afterwards(
    new_page, tenant, agent, requester, reviewer_a, reviewer_b, admin_user
):
    beside_the_browser(
        factories.make_policy,
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        thresholds=[{"group": "finance", "count": 2}],
        break_glass=RULE,
    )
    proposal = beside_the_browser(submit, agent, action=factories.refund_action(amount="240.00"))

    page = new_page()
    sign_in(page, reviewer_a)
    page.goto(f"/proposals/{proposal.id}/")
    wait_until_live(page)
    # Closed until opened, below the decision buttons; opened with the keyboard.
    control = page.locator("#break-glass")
    expect(control).not_to_have_attribute("open", "")
    focus_by_tab(page, "#break-glass summary")
    page.keyboard.press("Enter")
    expect(control).to_have_attribute("open", "")
    expect(control).to_contain_text("3 of 3 left this week")
    expect(control).to_contain_text("at most EUR 500.00 per release")
    page.get_by_label("Why this cannot wait for the quorum").fill(
        "The customer is charged twice every hour until this refund runs; finance is offline."
    )
    control.get_by_label("One-time code").fill(totp_code(reviewer_a))
    focus_by_tab(page, "#glass_confirm")
    page.keyboard.press("Space")
    expect(page.locator("#glass_confirm")).to_be_checked()
    screenshot(page, "break-glass-control")
    focus_by_tab(page, "#break-glass button[type=submit]")
    page.keyboard.press("Enter")

    expect(page.locator("#h-consequence")).to_have_text("Approved: the agent may now do this")
    record = live_section(page).locator(".break-glass-record")
    expect(record).to_contain_text("Released by break glass")
    expect(record).to_contain_text("Alice released this alone")
    expect(record).to_contain_text("not reviewed yet")
    screenshot(page, "break-glass-released")

    reviewer = new_page()
    sign_in(reviewer, admin_user)
    owed = reviewer.get_by_role("region", name="Post-hoc reviews: 1 break-glass release to review")
    expect(owed).to_contain_text("Released by Alice")
    screenshot(reviewer, "break-glass-post-hoc-queue")
    owed.get_by_role("link").first.click()
    form = reviewer.locator("#post-hoc")
    expect(form).to_contain_text("Alice released this by break glass")
    form.get_by_label("Disagree: it should have waited for the quorum").check()
    form.get_by_label("Note").fill("Finance was reachable by phone; this could have waited 20 minutes.")
    screenshot(reviewer, "break-glass-post-hoc-review")
    form.get_by_role("button", name="Record my post-hoc review").click()
    expect(reviewer.locator("#post-hoc")).to_contain_text("You disagreed with this break-glass release")
    expect(live_section(reviewer)).to_contain_text("disagreed")
    reviewer.goto("/")
    expect(reviewer.get_by_text("Post-hoc reviews:")).to_have_count(0)
    review = beside_the_browser(lambda: PostHocReview.objects.get(reviewer=admin_user))
    assert (review.verdict, review.done_at is not None) == ("disagree", True)

    # The tenant admin's oversight page: budgets used, the release and where its reviews stand.
    reviewer.get_by_role("link", name="Break-glass oversight").click()
    expect(reviewer.get_by_role("heading", name="Overdue post-hoc reviews: 0")).to_be_visible()
    budgets = reviewer.get_by_role("table", name="Each named person's break-glass releases")
    expect(budgets).to_contain_text("1 of 3")
    recent = reviewer.get_by_role("region", name="Recent releases")
    expect(recent).to_contain_text("disagreed")
    expect(recent).to_contain_text("pending")
    screenshot(reviewer, "break-glass-oversight")
