"""Agent text in a real browser: a right-to-left override in the summary and in an
argument is shown as a marked U+202E badge, the digits after it keep their order on screen, and the
page warns; a look-alike recipient is flagged. Screenshot: test-output/screenshots/agent-text.png."""

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import beside_the_browser, screenshot
from tests.browser.test_reviewing import sign_in
from tests.factories import refund_action, submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

RLO = "\u202e"

# Left edges on screen of the badge and of the text "1234" in one element, in CSS pixels.
POSITIONS = """(element) => {
  const badge = element.querySelector('.agent-text__char').getBoundingClientRect();
  const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
  let node;
  while ((node = walker.nextNode()) && !node.textContent.includes('1234')) {}
  const range = document.createRange();
  const start = node.textContent.indexOf('1234');
  range.setStart(node, start);
  range.setEnd(node, start + 1);  // the "1"
  return {badge: badge.left, one: range.getBoundingClientRect().left,
          four: (() => { range.setStart(node, start + 3); range.setEnd(node, start + 4);
                         return range.getBoundingClientRect().left; })()};
}"""


def test_a_right_to_left_override_is_shown_as_a_badge_and_reverses_nothing(
    new_page, agent, refund_policy, requester, reviewer_a
):
    action = refund_action()
    action["arguments"]["account"] = f"DE00{RLO}1234"
    action["arguments"]["recipient"] = "billing@p\u0430ypal.com"
    proposal = beside_the_browser(
        submit, agent, action=action, summary=f"Refund EUR 40.00 to account DE00{RLO}1234"
    )
    page = new_page()
    sign_in(page, reviewer_a)
    page.goto(f"/proposals/{proposal.id}/")

    # The heading is Reviewer's headline, with the look-alike recipient marked where it stands and
    # explained once, right under it; the agent's summary follows, quoted, with its override shown as
    # a badge.
    heading = page.locator("h1#proposal-title")
    expect(heading.locator(".headline__recipient .agent-text--flagged")).to_be_visible()
    expect(page.locator(".headline__warnings")).to_contain_text("mixes Cyrillic and Latin letters")
    title = page.locator(".proposal__agent-words q")
    expect(title.locator(".agent-text__char")).to_have_text("U+202E")
    expect(title.locator(".agent-text__warning")).to_contain_text("RIGHT-TO-LEFT OVERRIDE")
    screenshot(page, "agent-text")

    where = title.evaluate(POSITIONS)
    # Left to right on screen: the badge, then 1, then 4 (with the override acting, "4321" would show).
    assert where["badge"] < where["one"] < where["four"], where
    account_row = page.locator("tr", has=page.locator("th", has_text="account"))
    where = account_row.locator("td").evaluate(POSITIONS)
    assert where["badge"] < where["one"] < where["four"], where
