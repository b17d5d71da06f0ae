"""Reviewer writes the headline, in real Chromium: the heading, "What happens" and the queue row lead with
Reviewer's own rendering of the action from its canonical arguments; the agent's summary follows as the
agent's words, quoted, with the mismatch flagged beside it; a look-alike recipient is flagged in the
headline; "Can it be undone?" shows the strictest class, never the agent's word alone."""

import pytest
from playwright.sync_api import expect

from tests import factories
from tests.browser.conftest import beside_the_browser, screenshot
from tests.browser.test_reviewing import sign_in
from tests.factories import submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LOOKALIKE = "billing@p\u0430ypal.com"  # a Cyrillic "а"


def test_the_heading_is_reviewers_and_the_agents_summary_is_quoted_with_its_mismatch(
    new_page, agent, refund_policy, requester, reviewer_a
):
    proposal = beside_the_browser(
        submit,
        agent,
        action=factories.refund_action(order_id="1500", amount="4000.00"),
        summary="Refund EUR 4.00 for order 1500",
    )
    page = new_page()
    sign_in(page, reviewer_a)
    page.goto(f"/proposals/{proposal.id}/")
    heading = page.get_by_role("heading", level=1)
    expect(heading).to_contain_text("Refund EUR 4,000.00 · order:1500")
    expect(heading).not_to_contain_text("EUR 4.00")
    words = page.locator(".proposal__agent-words")
    expect(words.locator("q")).to_have_text("Refund EUR 4.00 for order 1500")
    expect(words).to_contain_text("The agent's words:")
    expect(words.get_by_role("note")).to_contain_text(
        "The agent's words name EUR 4.00; the action moves EUR 4,000.00"
    )
    what_happens = page.locator(".facts__row", has_text="What happens").first
    expect(what_happens.locator(".headline")).to_have_text("Refund EUR 4,000.00 · order:1500")
    expect(what_happens.locator("q")).to_have_text("Money leaves the merchant account")
    expect(page).to_have_title("Refund EUR 4,000.00 · order:1500 · Reviewer")
    screenshot(page, "headline-mismatch")

    page.goto("/")
    row = page.locator(f"#row-{proposal.id}")
    expect(row.locator("a.proposal-link")).to_have_text("Refund EUR 4,000.00 · order:1500")
    expect(row.locator("q")).to_have_text("Refund EUR 4.00 for order 1500")
    expect(row.get_by_role("note")).to_contain_text("the action moves EUR 4,000.00")
    expect(row.locator("td[data-label=Amount]")).to_have_text("EUR 4,000.00")
    screenshot(page, "queue-headline-mismatch")


def test_a_lookalike_recipient_is_flagged_in_the_headline(
    new_page, agent, refund_policy, requester, reviewer_a
):
    action = factories.refund_action()
    action["arguments"]["recipient"] = LOOKALIKE
    proposal = beside_the_browser(submit, agent, action=action, summary="Refund EUR 40.00 to PayPal billing")
    page = new_page()
    sign_in(page, reviewer_a)
    page.goto(f"/proposals/{proposal.id}/")
    heading = page.get_by_role("heading", level=1)
    expect(heading.locator(".headline__recipient")).to_contain_text(LOOKALIKE)
    expect(heading.locator(".headline__recipient .agent-text--flagged")).to_be_visible()
    head_warning = page.locator(".proposal__head").get_by_role("note").filter(has_text="Check the headline")
    expect(head_warning).to_contain_text("The recipient:")
    expect(head_warning).to_contain_text("mixes Cyrillic and Latin letters")
    expect(head_warning).to_be_in_viewport()
    screenshot(page, "headline-lookalike")
    page.goto("/")
    expect(page.locator(f"#row-{proposal.id} .agent-text__warning").first).to_contain_text("mixes Cyrillic")


def test_an_agents_reversible_true_on_an_unclassified_delete_reads_as_reversible_with_cost(
    new_page, tenant, agent, requester, reviewer_a
):
    factories.make_policy(
        tenant, "files", tool_pattern="files.*", thresholds=[{"group": "finance", "count": 1}]
    )
    action = {"tool": "files.delete_tree", "arguments": {"path": "/srv/data/customers/"}}
    proposal = beside_the_browser(
        submit,
        agent,
        action=action,
        summary="Tidy up an old folder",
        consequences={"effect": "The folder is removed", "reversible": True},
    )
    page = new_page()
    sign_in(page, reviewer_a)
    page.goto(f"/proposals/{proposal.id}/")
    undo = page.locator(".facts__row", has_text="Can it be undone?")
    expect(undo).to_contain_text("Only at a cost: reversible with cost (R2)")
    expect(undo).not_to_contain_text("Yes, it can be reversed")
    expect(undo.locator("q")).to_have_text("reversible")
    expect(page.get_by_role("heading", level=1)).to_contain_text("Delete tree · path:/srv/data/customers/")
    screenshot(page, "reversibility-strictest")


def test_an_edited_proposals_queue_row_follows_the_edit(
    new_page, agent, refund_policy, requester, reviewer_a, reviewer_b
):
    from tests.browser.test_reading_true import _edit

    original = beside_the_browser(
        submit, agent, action=factories.refund_action(amount="75.50", currency="USD")
    )
    edited = beside_the_browser(_edit, original, reviewer_b, "50.00")
    page = new_page()
    sign_in(page, reviewer_a)
    row = page.locator(f"#row-{edited.id}")
    expect(row.locator("a.proposal-link")).to_have_text("Refund USD 50.00 · order:1182")
    expect(row.locator("td[data-label=Amount]")).to_have_text("USD 50.00")
    expect(row.locator("a.proposal-link")).not_to_contain_text("75.50")
