"""A reviewer never misreads what they approve (real Chromium against Daphne)."""

import pytest
from playwright.sync_api import expect

from approvals.services.votes import edit_proposal
from tests import factories
from tests.browser.conftest import beside_the_browser, screenshot
from tests.browser.test_reviewing import live_section, sign_in, wait_until_live
from tests.factories import step_up_for, submit, totp_code

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _edit(proposal, editor, amount):
    arguments = {**proposal.action["arguments"], "amount": amount}
    return edit_proposal(
        proposal.id,
        editor,
        arguments=arguments,
        digest_seen=proposal.action_digest,
        note="partial refund",
        step_up=step_up_for(editor, totp_code(editor)),
    )


def test_an_edited_proposal_reads_as_the_edit(
    new_page, agent, refund_policy, requester, reviewer_a, reviewer_b
):
    original = beside_the_browser(
        submit, agent, action=factories.refund_action(amount="75.50", currency="USD")
    )
    edited = beside_the_browser(_edit, original, reviewer_b, "50.00")
    page = new_page()
    sign_in(page, reviewer_a)
    page.goto(f"/proposals/{edited.id}/")
    heading = page.get_by_role("heading", level=1)
    expect(heading).to_contain_text("USD 50.00")
    expect(heading).to_contain_text("amount 50.00, was 75.50")
    expect(heading).not_to_contain_text("Refund USD 75.50")
    what_happens = page.locator(".facts__row", has_text="What happens").first
    expect(what_happens).to_contain_text("amount = 50.00")
    expect(what_happens).not_to_contain_text("75.50")
    expect(page.locator(".facts__row", has_text="How much").first).to_contain_text("USD 50.00")
    # The agent's words about the original request are there, struck through and labelled as the agent's.
    original_words = page.get_by_role("group", name="The agent's description of the original request")
    expect(original_words.locator("del").first).to_contain_text("Refund USD 75.50")
    edit_table = page.get_by_role("table", name="What the edit changed in the action")
    expect(edit_table.locator("ins")).to_contain_text("50.00")
    expect(edit_table.locator("del")).to_contain_text("75.50")
    expect(page.locator("table.diff--original del").last).to_contain_text("75.50")
    screenshot(page, "edited-proposal")


def test_the_page_follows_the_state_live_after_an_approval(
    new_page, agent, refund_policy, requester, reviewer_a
):
    proposal = beside_the_browser(submit, agent)
    page = new_page()
    sign_in(page, reviewer_a)
    page.goto(f"/proposals/{proposal.id}/")
    wait_until_live(page)
    page.evaluate("window.notReloaded = true")
    expect(page.locator("#you")).to_contain_text("you can decide this")
    page.get_by_label("One-time code").fill(totp_code(reviewer_a))
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#h-consequence")).to_have_text("Approved: the agent may now do this")
    expect(page.locator("#you")).to_contain_text("nothing here is open for a decision now")
    expect(live_section(page)).to_contain_text("1 of 1")
    assert page.evaluate("window.notReloaded")


def test_after_a_rejection_the_quorum_no_longer_asks_for_votes(
    new_page, agent, refund_policy, requester, reviewer_a
):
    proposal = beside_the_browser(submit, agent)
    page = new_page()
    sign_in(page, reviewer_a)
    page.goto(f"/proposals/{proposal.id}/")
    wait_until_live(page)
    page.get_by_label("Reason").fill("Duplicate of an earlier refund")
    page.get_by_label("One-time code").fill(totp_code(reviewer_a))
    page.get_by_role("button", name="Reject").click()
    expect(page.locator("#h-consequence")).to_have_text("Rejected: this will not happen")
    expect(live_section(page)).to_contain_text("not reached")
    expect(live_section(page)).not_to_contain_text("more needed")


def test_a_superseded_page_links_to_its_successor_without_a_reload(
    new_page, agent, refund_policy, requester, reviewer_a, reviewer_b
):
    proposal = beside_the_browser(submit, agent)
    watcher, editor = new_page(), new_page()
    sign_in(watcher, reviewer_a)
    watcher.goto(f"/proposals/{proposal.id}/")
    wait_until_live(watcher)
    watcher.evaluate("window.notReloaded = true")
    sign_in(editor, reviewer_b)
    editor.goto(f"/proposals/{proposal.id}/edit")
    editor.get_by_label("amount").fill("30.00")
    editor.get_by_label("One-time code").fill(totp_code(reviewer_b))  # an edit needs the vote's step-up
    editor.get_by_role("button", name="Create the edited proposal").click()
    expect(watcher.get_by_role("link", name="a newer proposal")).to_be_visible()
    expect(watcher.locator("#h-consequence")).to_have_text("Replaced: this will not happen as written here")
    assert watcher.evaluate("window.notReloaded")


def test_risk_size_and_consequence_are_read_at_a_glance(new_page, tenant, agent, requester, reviewer_a):
    factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        thresholds=[{"group": "finance", "count": 1}],
        risk="high",
    )
    proposal = beside_the_browser(submit, agent, action=factories.refund_action(amount="1850.00"))
    page = new_page(width=700)
    sign_in(page, reviewer_a)
    page.goto(f"/proposals/{proposal.id}/")
    expect(page.locator(".proposal__head")).to_contain_text("High risk")
    amount = page.locator(".facts__row", has_text="How much").locator(".amount").first
    expect(amount).to_have_text("EUR 1,850.00")
    assert amount.evaluate("e => getComputedStyle(e).whiteSpace") == "nowrap"
    decide = page.get_by_role("group", name="Decide")
    approve_button = decide.get_by_role("button", name="Approve refund of EUR 1,850.00")
    expect(approve_button).to_be_visible()
    assert approve_button.locator(".amount").evaluate("e => getComputedStyle(e).whiteSpace") == "nowrap"
    expect(decide.get_by_role("button", name="Reject refund of EUR 1,850.00")).to_be_visible()
    # One reason box for the two decisions; the question box only with "ask".
    expect(page.get_by_label("Question for the agent")).to_be_hidden()
    page.get_by_text("Ask the agent a question instead").click()
    expect(page.get_by_label("Question for the agent")).to_be_visible()


def test_on_a_phone_the_decision_bar_stays_in_view_and_focus_survives_a_live_update(
    new_page, tenant, agent, requester, reviewer_a, reviewer_b
):
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 2}]
    )
    proposal = beside_the_browser(submit, agent, action=factories.refund_action(amount="1850.00"))
    phone, other = new_page(width=390, height=844), new_page()
    sign_in(phone, reviewer_a)
    phone.goto(f"/proposals/{proposal.id}/")
    wait_until_live(phone)
    # The nav is one row: its three links share a line.
    tops = phone.locator("nav[aria-label=Main] a").evaluate_all(
        "links => links.map(a => a.getBoundingClientRect().top)"
    )
    assert len(set(tops)) == 1, tops
    bar = phone.get_by_role("region", name="Status and decision, always in view")
    expect(bar).to_be_in_viewport()
    expect(bar).to_contain_text("Waiting for review")
    expect(bar).to_contain_text("0/2")
    screenshot(phone, "phone-detail")
    phone.screenshot(path=str(screenshot(phone, "phone-detail").with_name("phone-viewport.png")))

    bar.get_by_role("button", name="Approve").focus()
    sign_in(other, reviewer_b)
    other.goto(f"/proposals/{proposal.id}/")
    other.get_by_label("One-time code").fill(totp_code(reviewer_b))
    other.get_by_role("button", name="Approve").click()
    expect(bar).to_contain_text("1/2")  # a live update replaced the bar under the focus
    assert phone.evaluate("document.activeElement.closest('#decision-bar') !== null")
    assert phone.evaluate("document.activeElement.value") == "approve"

    # The bar's Approve submits the decision form: without a code the reply points at the code field.
    bar.get_by_role("button", name="Approve").click()
    expect(phone.get_by_label("One-time code")).to_be_focused()
    phone.get_by_label("One-time code").fill(totp_code(reviewer_a))
    bar.get_by_role("button", name="Approve").click()
    expect(bar).to_contain_text("Approved")


def test_a_likely_duplicate_is_flagged_with_the_history_of_the_same_order(
    new_page, agent, refund_policy, requester, reviewer_a, reviewer_b
):
    beside_the_browser(factories.approve, agent, reviewer_b, summary="Refund EUR 40.00 to order 1182")
    again = beside_the_browser(submit, agent, summary="Refund EUR 40.00 to order 1182 (resent)")
    page = new_page()
    sign_in(page, reviewer_a)
    page.goto(f"/proposals/{again.id}/")
    warning = page.get_by_role("alert").filter(has_text="Likely duplicate")
    expect(warning).to_contain_text("order:1182")
    expect(warning).to_contain_text("approved by Bob")
    earlier = page.get_by_role("region", name="Earlier on the same target")
    # Reviewer's headline of the earlier action, then the agent's words for it.
    expect(earlier.get_by_role("link", name="Refund EUR 40.00 · order:1182")).to_be_visible()
    expect(earlier.locator("q").first).to_have_text("Refund EUR 40.00 to order 1182")
    expect(earlier).to_contain_text("EUR 40.00")
    screenshot(page, "duplicate-warning")


def test_a_reviewer_approves_with_a_reservation(new_page, agent, refund_policy, requester, reviewer_a):
    proposal = beside_the_browser(submit, agent)
    page = new_page()
    sign_in(page, reviewer_a)
    page.goto(f"/proposals/{proposal.id}/")
    page.get_by_text("Approve with a reservation").click()
    page.get_by_label("Your reservation").fill("The ticket does not show the parcel was lost")
    page.get_by_label("Reason").fill("Customer is a long-standing account")
    page.get_by_label("One-time code").fill(totp_code(reviewer_a))
    page.get_by_role("button", name="Approve").click()
    expect(live_section(page)).to_contain_text(
        "with a reservation: “The ticket does not show the parcel was lost”"
    )
    expect(live_section(page)).to_contain_text("“Customer is a long-standing account”")
    screenshot(page, "approved-with-reservation")
