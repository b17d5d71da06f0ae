"""The batch page in real Chromium: a reviewer decides a batch with the keyboard alone, and on a phone
the members' table fits the screen as cards, says what each flag means in words, and a subset can be
approved with one code."""

import pytest
from playwright.sync_api import expect

from approvals.canonical import manifest_digest
from approvals.models import Proposal
from approvals.schemas import ApprovalRequest
from approvals.services.batches import submit_batch
from approvals.states import State
from tests import factories
from tests.browser.conftest import beside_the_browser, screenshot
from tests.browser.test_phone_and_keyboard import PHONE, _assert_fits
from tests.browser.test_reviewing import sign_in
from tests.factories import approval_request, refund_action, totp_code

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def a_batch(agent, orders: list[tuple[str, str]]):
    members = [
        ApprovalRequest.model_validate(
            approval_request(
                action=refund_action(order_id=order, amount=amount),
                request_id=f"refund-{index}",
                consequences={"reversible": True},
            )
        )
        for index, (order, amount) in enumerate(orders)
    ]
    batch, _ = submit_batch(
        agent,
        task_id="task-outage",
        context_id="",
        batch_id="outage",
        summary="Refunds after the outage",
        members=members,
        manifest=manifest_digest([m.action_digest for m in members]),
    )
    return batch


@pytest.fixture
def batch_policy(tenant):
    return factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        thresholds=[{"group": "finance", "count": 1}],
        batch={"max_members": 25, "max_total": {"EUR": "1000.00"}, "partial": True},
    )


def _tab_to(page, selector: str, limit: int = 80) -> None:
    """Press Tab until the element `selector` names has the focus (the keyboard's way there)."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("(s) => document.activeElement === document.querySelector(s)", selector):
            return
    raise AssertionError(f"Tab never reached {selector}")


def test_a_reviewer_approves_a_batch_with_the_keyboard_alone(
    new_page, agent, batch_policy, requester, reviewer_a
):
    batch = beside_the_browser(a_batch, agent, [("1182", "25.00"), ("1183", "40.00"), ("1184", "9.90")])
    page = new_page()
    sign_in(page, reviewer_a)
    page.goto(f"/batches/{batch.id}/")
    expect(page.get_by_role("heading", level=1)).to_contain_text("3 actions in one batch")
    expect(page.get_by_role("table")).to_contain_text("order:1183")
    _tab_to(page, "#id_otp_code")
    page.keyboard.type(totp_code(reviewer_a))
    page.keyboard.press("Tab")  # past the code: the first of the two equal buttons
    expect(page.get_by_role("button", name="Approve the batch")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_text("Your approval is recorded for 3 members.")).to_be_visible()
    assert set(Proposal.objects.values_list("state", flat=True)) == {State.APPROVED}
    screenshot(page, "batch-approved-by-keyboard")


def test_on_a_phone_the_batch_fits_flags_in_words_and_a_subset_is_approved(
    new_page, agent, batch_policy, requester, reviewer_a
):
    # Two refunds of one order: each row says so in words, not by colour alone.
    batch = beside_the_browser(a_batch, agent, [("1182", "25.00"), ("1182", "30.00"), ("1190", "12.00")])
    page = new_page(**PHONE)
    sign_in(page, reviewer_a)
    page.goto(f"/batches/{batch.id}/")
    _assert_fits(page, "batch")
    expect(page.get_by_text("Same target as another member")).to_have_count(2)
    expect(page.get_by_text("EUR 67.00").first).to_be_visible()  # the total, currency first
    page.get_by_label("Approve member 1").uncheck()
    page.get_by_label("Reason").fill("order 1182 is refunded once")
    page.get_by_label("One-time code").fill(totp_code(reviewer_a))
    page.get_by_role("button", name="Approve the batch").click()
    expect(page.get_by_text("Your approval is recorded for 2 members.")).to_be_visible()
    _assert_fits(page, "batch-decided")
    states = dict(Proposal.objects.values_list("request_id", "state"))
    assert states == {"refund-0": State.APPROVED, "refund-1": State.REJECTED, "refund-2": State.APPROVED}
