"""With the CSP allowing no inline style, real Chromium shows the pages that changed with it and refuses
nothing: the audit metrics with their SVG charts, a proposal's detail page and its edit form. The edit
form also hands a hidden character (U+200B) in an agent's value back to the browser as the very
character, so a value left alone is what the agent sent."""

import pytest
from playwright.sync_api import expect

from audit.chain.sequencer import sequence_pending
from tests.browser.conftest import beside_the_browser
from tests.browser.test_reviewing import sign_in
from tests.factories import approve, refund_action, submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Every CSP refusal, as the page reports it (before any script of the page runs).
COLLECT_VIOLATIONS = """
window.__violations = [];
document.addEventListener('securitypolicyviolation', (event) => {
  window.__violations.push(event.violatedDirective + ' ' + (event.blockedURI || 'inline'));
});
"""


def violations(page) -> list[str]:
    return page.evaluate("window.__violations")


def test_the_pages_render_under_the_policy_without_a_refusal(
    new_page, agent, refund_policy, requester, reviewer_a, tenant
):
    beside_the_browser(approve, agent, reviewer_a)
    beside_the_browser(sequence_pending)  # the metrics read the chained trail
    action = refund_action()
    action["arguments"]["account"] = "DE00\u200b1234"
    proposal = beside_the_browser(submit, agent, action=action)
    page = new_page()
    page.add_init_script(COLLECT_VIOLATIONS)
    console = []
    page.on("console", lambda message: console.append(message.text))
    sign_in(page, reviewer_a)

    page.goto(f"/audit/{tenant.slug}/metrics/?days=7")
    chart = page.locator("svg.chart").first
    expect(chart).to_be_visible()
    box = chart.bounding_box()
    assert 0 < box["width"] <= page.viewport_size["width"] and box["height"] > 0
    assert violations(page) == []

    page.goto(f"/proposals/{proposal.id}/")
    expect(page.get_by_role("heading", name="Earlier on the same target")).to_be_visible()
    assert violations(page) == []

    page.goto(f"/proposals/{proposal.id}/edit")
    field = page.get_by_label("account", exact=True)
    assert field.input_value() == "DE00\u200b1234"
    assert violations(page) == []
    assert not [text for text in console if "Content Security Policy" in text], console
