"""Reviewers in a real browser: sign in with a one-time code, decide, see each other's votes live."""

import re
import urllib.parse

import pytest
from django_otp.oath import TOTP
from django_otp.plugins.otp_totp.models import TOTPDevice
from playwright.sync_api import expect

from approvals.models import Proposal
from approvals.states import State
from tests import factories
from tests.browser.conftest import beside_the_browser, needs_shared_channel_layer, screenshot
from tests.factories import PASSWORD, submit, totp_code

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def sign_in(page, user):
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(user.get_username())
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_label("One-time code").fill(totp_code(user))
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="To decide", level=1)).to_be_visible()


def wait_until_live(page):
    expect(page.locator("[data-live-status]")).to_have_attribute("data-state", "live")


def live_section(page):
    return page.locator("#live")


def focus_by_tab(page, selector: str, limit: int = 60):
    """Press Tab until the element matching `selector` has the focus (keyboard only)."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("(selector) => document.activeElement.matches(selector)", selector):
            return
    raise AssertionError(f"Tab never reached {selector}")


def test_a_reviewer_signs_in_and_approves_with_the_keyboard_only(
    new_page, agent, refund_policy, requester, reviewer_a
):
    proposal = beside_the_browser(submit, agent, summary="Refund EUR 40.00 to order 1182")
    page = new_page()
    page.goto("/accounts/login/")
    screenshot(page, "login")
    assert page.evaluate("document.activeElement.id") == "id_username"  # the form starts focused
    page.keyboard.type("reviewer_a")
    page.keyboard.press("Tab")
    page.keyboard.type(PASSWORD)
    page.keyboard.press("Tab")
    page.keyboard.type(totp_code(reviewer_a))
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="To decide", level=1)).to_be_visible()
    screenshot(page, "queue")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent.trim()") == "Skip to content"

    focus_by_tab(page, f'a[href="/proposals/{proposal.id}/"]')
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="If this is approved")).to_be_visible()
    wait_until_live(page)
    screenshot(page, "detail")

    focus_by_tab(page, "#id_otp_code")
    page.keyboard.type(totp_code(reviewer_a))
    # Enter in a field must not pick a decision for the reviewer: it submits nothing.
    page.evaluate("window.submits = 0; document.addEventListener('submit', () => window.submits++, true)")
    page.keyboard.press("Enter")
    assert page.evaluate("window.submits") == 0
    focus_by_tab(page, 'button[value="approve"]')
    page.keyboard.press("Enter")
    expect(page.get_by_text("Your approval is recorded.")).to_be_visible()
    expect(live_section(page)).to_contain_text("Approved")
    assert page.evaluate("document.activeElement.textContent").strip() == "✓ Your approval is recorded."
    assert Proposal.objects.get(pk=proposal.pk).state == State.APPROVED
    screenshot(page, "detail-approved")


def test_a_wrong_code_is_reported_inline_and_the_reason_stays(
    new_page, agent, refund_policy, requester, reviewer_a
):
    proposal = beside_the_browser(submit, agent)
    page = new_page()
    sign_in(page, reviewer_a)
    page.goto(f"/proposals/{proposal.id}/")
    page.get_by_label("Reason").fill("Matches the support ticket")
    page.get_by_label("One-time code").fill("000000")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#id_otp_code_error")).to_contain_text("that code is not valid")
    expect(page.get_by_label("Reason")).to_have_value("Matches the support ticket")
    expect(page.get_by_label("One-time code")).to_be_focused()  # where the reply speaks
    expect(page.get_by_role("heading", name="If this is approved")).to_be_visible()  # no page change
    screenshot(page, "detail-wrong-code")


def test_two_reviewers_reach_a_two_of_two_quorum_and_see_each_other_live(
    new_page, tenant, agent, requester, reviewer_a, reviewer_b
):
    factories.make_policy(tenant, "refunds", thresholds=[{"group": "finance", "count": 2}], risk="high")
    proposal = beside_the_browser(submit, agent, summary="Refund EUR 900.00 to order 77")
    alice, bob = new_page(), new_page()
    for page, person in ((alice, reviewer_a), (bob, reviewer_b)):
        sign_in(page, person)
        page.goto(f"/proposals/{proposal.id}/")
        wait_until_live(page)
        page.evaluate("window.notReloaded = true")
    expect(live_section(bob)).to_contain_text("0 of 2")

    alice.get_by_label("One-time code").fill(totp_code(reviewer_a))
    alice.get_by_role("button", name="Approve").click()
    expect(alice.get_by_text("Your approval is recorded.")).to_be_visible()
    expect(live_section(bob)).to_contain_text("Alice approved")
    expect(live_section(bob)).to_contain_text("1 of 2")
    screenshot(bob, "detail-one-of-two")

    bob.get_by_label("One-time code").fill(totp_code(reviewer_b))
    bob.get_by_role("button", name="Approve").click()
    expect(live_section(alice)).to_contain_text("Bob approved")
    expect(live_section(alice)).to_contain_text("Approved")
    expect(live_section(alice)).to_contain_text("Signed decision")
    assert alice.evaluate("window.notReloaded") and bob.evaluate("window.notReloaded")
    assert Proposal.objects.get(pk=proposal.pk).state == State.APPROVED
    alice.goto("/watching/")
    expect(alice.locator(f"#row-{proposal.id} q")).to_have_text("Refund EUR 900.00 to order 77")
    screenshot(alice, "watching")


def test_a_new_proposal_appears_in_an_open_queue(new_page, agent, refund_policy, requester, reviewer_a):
    needs_shared_channel_layer()
    page = new_page()
    sign_in(page, reviewer_a)
    wait_until_live(page)
    expect(page.locator("#queue-count")).to_have_text("0 proposals waiting for you")
    page.evaluate("window.notReloaded = true")
    proposal = beside_the_browser(submit, agent, summary="Refund EUR 12.50 to order 3141")
    row = page.locator(
        "tr", has=page.locator("q", has_text="Refund EUR 12.50 to order 3141")
    )  # the agent's words
    expect(row.locator("a.proposal-link")).to_have_attribute("href", f"/proposals/{proposal.id}/")
    expect(page.locator("#queue-count")).to_have_text("1 proposal waiting for you")
    assert page.evaluate("window.notReloaded")


def test_edit_makes_a_successor_that_someone_else_decides(
    new_page, agent, refund_policy, requester, reviewer_a, reviewer_b
):
    proposal = beside_the_browser(submit, agent)
    page = new_page()
    sign_in(page, reviewer_a)
    page.goto(f"/proposals/{proposal.id}/")
    page.get_by_role("link", name="Edit the arguments").click()
    page.get_by_label("amount").fill("30.00")
    page.get_by_label("What you changed and why").fill("Customer asked for a partial refund")
    page.get_by_label("One-time code").fill(totp_code(reviewer_a))  # an edit needs the vote's step-up
    screenshot(page, "edit")
    page.get_by_role("button", name="Create the edited proposal").click()

    successor = Proposal.objects.get(supersedes=proposal)
    expect(page).to_have_url(re.compile(f"/proposals/{successor.id}/$"))
    expect(page.get_by_text("your edit is a new proposal", exact=False)).to_be_visible()
    expect(page.locator("#decision")).to_contain_text("you edited this proposal; someone else must decide it")
    changes = page.get_by_role("table", name="Arguments that differ from the earlier proposal")
    expect(changes).to_contain_text("40.00")
    expect(changes).to_contain_text("30.00")
    assert successor.action["arguments"]["amount"] == "30.00"

    page.get_by_role("link", name="an earlier proposal").click()
    expect(page.get_by_text("This proposal was replaced by")).to_be_visible()
    expect(page.get_by_role("link", name="a newer proposal")).to_have_attribute(
        "href", f"/proposals/{successor.id}/"
    )


def test_ask_for_information_and_the_agents_answer_replaces_the_proposal(
    new_page, agent, refund_policy, requester, reviewer_a
):
    proposal = beside_the_browser(submit, agent, task_id="task-ask")
    page = new_page()
    sign_in(page, reviewer_a)
    page.goto(f"/proposals/{proposal.id}/")
    wait_until_live(page)
    expect(page.get_by_label("Question for the agent")).to_be_hidden()  # it comes with the action
    page.get_by_text("Ask the agent a question instead").click()
    page.get_by_role("button", name="Ask for information").click()
    expect(page.locator("#id_question_error")).to_contain_text("write the question the agent must answer")
    page.get_by_label("Question for the agent").fill("Which order was it, 1182 or 1183?")
    page.get_by_label("One-time code").fill(totp_code(reviewer_a))  # asking needs the vote's step-up
    page.get_by_role("button", name="Ask for information").click()
    expect(page.get_by_text("Your question was sent to the agent")).to_be_visible()
    expect(live_section(page)).to_contain_text("Information requested")
    assert Proposal.objects.get(pk=proposal.pk).state == State.INFO_REQUESTED

    answer = beside_the_browser(
        submit,
        agent,
        task_id="task-ask",
        supersedes=proposal.request_id,
        action=factories.refund_action(order_id="1183"),
    )
    page.reload()
    expect(page.get_by_text("This proposal was replaced by")).to_be_visible()
    page.get_by_role("link", name="a newer proposal").click()
    expect(page).to_have_url(re.compile(f"/proposals/{answer.id}/$"))
    expect(page.get_by_text("the agent's new request")).to_be_visible()
    changes = page.get_by_role("table", name="Arguments that differ from the earlier proposal")
    expect(changes).to_contain_text("1182")
    expect(changes).to_contain_text("1183")
    expect(page.get_by_role("button", name="Approve")).to_be_visible()
    page.set_viewport_size({"width": 390, "height": 844})
    screenshot(page, "detail-narrow")


def test_a_newcomer_enrolls_an_authenticator_and_sees_backup_codes_once(new_page, tenant):
    factories.make_user("newcomer", tenant=tenant, groups=["finance"], totp=False)
    page = new_page()
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill("newcomer")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Set up your authenticator")).to_be_visible()
    expect(
        page.get_by_role("img", name="QR code that adds your Reviewer account to an authenticator app")
    ).to_be_visible()
    screenshot(page, "enroll")

    device = TOTPDevice.objects.get(user__username="newcomer", confirmed=False)
    code = TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift).token()
    page.get_by_label("Code from your authenticator app").fill(f"{code:06d}")
    page.get_by_role("button", name="Confirm and continue").click()
    expect(page.get_by_role("heading", name="Keep your backup codes")).to_be_visible()
    expect(page.get_by_role("list", name="Backup codes").get_by_role("listitem")).to_have_count(10)
    download = page.get_by_role("link", name="Download as a text file")
    expect(download).to_have_attribute("download", "reviewer-backup-codes.txt")
    first_code = page.get_by_role("list", name="Backup codes").get_by_role("listitem").first.inner_text()
    assert first_code.strip() in urllib.parse.unquote(download.get_attribute("href"))
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.get_by_role("button", name="Copy the codes").click()
    expect(page.locator("[data-copy-status]")).to_have_text("Copied.")
    assert first_code.strip() in page.evaluate("navigator.clipboard.readText()")
    screenshot(page, "enroll-backup-codes")
    page.get_by_role("link", name="I stored them").click()
    expect(page.get_by_role("heading", name="To decide", level=1)).to_be_visible()
