"""A first walk through Reviewer in real Chromium against Daphne, as a new reviewer, a compliance officer and
a tenant admin take it, checking on each page what first readers stumbled on before: a refund from each
agent path (REST over HTTP, the A2A push webhook over HTTP, an adapter's request and an MCP gateway's
through the intake service) reads with its currency; a look-alike recipient is explained once above the
action and flagged where it stands; the way to out of office is in the navigation; an approval with a
one-time code leaves the approver on their vote, not on a required field; an edit's page lists what it
replaced; the audit page says how to install the verifier; the metrics tables name every heading; the
admin's group, policy and dry-run pages read an edited proposal by its action.

Each step saves a screenshot: test-output/screenshots/<test>/NN-<step>.png."""

import json
import re

import httpx
import pytest
from django.utils import timezone
from playwright.sync_api import expect

from approvals.models import Decision, Proposal
from approvals.services.decisions import consume_decision
from approvals.services.tenants import grant_admin_site, remove_tenant_membership
from approvals.services.votes import edit_proposal
from tests import factories
from tests.approvals.test_headline import langgraph_fields
from tests.approvals.test_push import parked
from tests.browser.conftest import beside_the_browser, needs_shared_channel_layer
from tests.browser.test_reviewing import sign_in, wait_until_live
from tests.factories import PASSWORD, approval_request, fresh_step_up, submit, totp_code

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LOOKALIKE = "billing@p\u0430ypal.com"  # a Cyrillic "а" in "paypal"
LOOKALIKE_WARNING = "mixes Cyrillic and Latin letters"
MCP_CLIENT = {"name": "claude-code", "title": "Claude Code", "version": "1.2"}


def signed_in(page, user) -> None:
    """tests/browser/test_reviewing.py's sign-in for anyone: a compliance officer lands elsewhere than on
    "To decide", so this waits for the main navigation instead."""
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(user.get_username())
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_label("One-time code").fill(totp_code(user))
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("navigation", name="Main")).to_be_visible()


def refund(order_id: str, amount: str, **arguments) -> dict:
    action = factories.refund_action(order_id=order_id, amount=amount)
    action["arguments"].update(arguments)
    return action


def submitted_over_rest(live_server_url, action) -> str:
    """POST /api/v1/proposals as a pull agent's client sends it (the agent's API token)."""
    body = {
        "task_id": f"rest-{action['arguments']['order_id']}",
        "context_id": "ctx-rest",
        "request": approval_request(action=action),
    }
    answer = httpx.post(
        f"{live_server_url}/api/v1/proposals",
        content=json.dumps(body),
        headers={"Authorization": "Bearer api-secret", "Content-Type": "application/json"},
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    return answer.json()["proposal_id"]


def pushed_over_a2a(live_server_url, action, summary: str) -> str:
    """The A2A push webhook, with the body the a2a-sdk's push sender posts for a parked task."""
    task_id = f"a2a-{action['arguments']['order_id']}"
    body = parked(request=approval_request(action=action, summary=summary), task_id=task_id)
    answer = httpx.post(
        f"{live_server_url}/a2a/push/refund-demo/",
        content=json.dumps(body),
        headers={"X-A2A-Notification-Token": "push-secret", "Content-Type": "application/json"},
        timeout=30,
    )
    assert answer.status_code == 201, answer.text  # a new proposal
    return answer.json()["proposal_id"]


def warnings_above_the_action(page) -> int:
    """How many times the page explains a look-alike before "The action" table (heading, headline
    check, consequence): the warnings' own elements and the sentence in the heading's notice."""
    return page.evaluate(
        """(words) => {
          const end = document.getElementById('h-arguments');
          const before = (node) => node.compareDocumentPosition(end) & Node.DOCUMENT_POSITION_FOLLOWING;
          const texts = [...document.querySelectorAll('.agent-text__warning, .headline__warnings')]
            .filter(before).map((element) => element.textContent);
          return texts.join(' ').split(words).length - 1;
        }""",
        LOOKALIKE_WARNING,
    )


def test_a_reviewer_walks_the_queue_a_refund_from_each_agent_path_an_approval_and_the_history(
    new_page, live_server_url, steps, tenant, agent, refund_policy, requester, reviewer_a, reviewer_b
):
    rest_id = submitted_over_rest(live_server_url, refund("1182", "40.00"))
    a2a_id = pushed_over_a2a(
        live_server_url, refund("1190", "12.99", recipient=LOOKALIKE), "Refund EUR 12.99 to PayPal billing"
    )
    adapter = langgraph_fields()  # what reviewer_gate's LangGraph node sends: the currency is the tool's
    adapter_id = beside_the_browser(
        submit,
        agent,
        action=adapter["action"],
        summary=adapter["summary"],
        consequences=adapter["consequences"],
    ).id
    mcp_id = beside_the_browser(
        submit,
        agent,
        action=refund("1204", "18.50"),
        consequences={"mcp_server": "payments", "mcp_client": MCP_CLIENT, "risk": "gated"},
    ).id

    page = new_page()
    sign_in(page, reviewer_a)
    wait_until_live(page)
    nav = page.get_by_role("navigation", name="Main")
    expect(nav.get_by_role("link", name="Out of office")).to_be_visible()
    amounts = page.locator("td[data-label=Amount] .amount")
    expect(amounts).to_have_count(4)
    assert all(re.match(r"EUR \d", text) for text in amounts.all_inner_texts())
    steps.shot(page, "queue")

    # REST: the headline, the amount and the buttons name the currency; one approval does: no break glass.
    page.goto(f"/proposals/{rest_id}/")
    wait_until_live(page)
    expect(page.get_by_role("heading", level=1)).to_have_text("Refund EUR 40.00 · order:1182")
    expect(page.locator(".facts__row", has_text="How much").locator(".amount")).to_have_text("EUR 40.00")
    expect(page.locator("#decision button[value=approve]")).to_contain_text("Approve refund of EUR 40.00")
    expect(page.locator("#break-glass")).to_have_count(0)
    steps.shot(page, "rest-refund")

    # A2A: the look-alike recipient is explained once above the action, in the heading's notice,
    # never in doubled quotes, and flagged in the heading, "What happens" and "To whom / what".
    page.goto(f"/proposals/{a2a_id}/")
    wait_until_live(page)
    assert warnings_above_the_action(page) == 1
    notice = page.locator(".headline__warnings")
    expect(notice).to_contain_text(f"The recipient: “{LOOKALIKE}” {LOOKALIKE_WARNING}")
    expect(notice).to_be_in_viewport()
    assert "““" not in page.content() and "””" not in page.content()
    to_whom = page.locator(".facts__row", has_text="To whom / what")
    expect(to_whom).to_contain_text(f"order:1190 · to {LOOKALIKE}")
    expect(to_whom.locator(".agent-text--flagged")).to_have_count(1)
    expect(to_whom).to_contain_text("check it: see the warning under the heading")
    expect(to_whom).not_to_contain_text("Not stated by the agent")
    expect(page.get_by_role("heading", level=1).locator(".agent-text--flagged")).to_have_count(1)
    steps.shot(page, "a2a-lookalike-refund")

    # An adapter's request: the currency is the tool description's, and the page says it is not bound.
    page.goto(f"/proposals/{adapter_id}/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Refund EUR 22.00 · order:7002")
    expect(page.locator(".headline__currency")).to_contain_text("not part of the approved action")
    steps.shot(page, "adapter-refund")

    # The MCP gateway's client reads as words under "MCP client", not as raw JSON.
    page.goto(f"/proposals/{mcp_id}/")
    client_row = page.locator(".facts__row", has=page.locator("dt", has_text="MCP client"))
    expect(client_row.locator("dd")).to_have_text("Name: claude-code · Title: Claude Code · Version: 1.2")
    expect(page.locator(".facts")).not_to_contain_text('{"name"')
    steps.shot(page, "mcp-refund")

    # An approval with a one-time code; the agent starts at once: the approver reads their vote and the
    # agent's start, and the compensation form waits closed behind a disclosure.
    page.goto(f"/proposals/{rest_id}/")
    wait_until_live(page)
    page.get_by_label("One-time code").fill(totp_code(reviewer_a))
    page.locator("#decision button[value=approve]").click()
    expect(page.get_by_text("Your approval is recorded.")).to_be_visible()
    steps.shot(page, "approved")
    decision = Decision.objects.get(proposal_id=rest_id)
    beside_the_browser(consume_decision, agent, decision.jti, rev=decision.rev)
    page.reload()
    panel = page.locator("#decision")
    expect(panel).to_contain_text("You approved this at")
    expect(panel.locator("details.compensation")).not_to_have_attribute("open", "")
    expect(panel.get_by_label("Compensation note")).not_to_be_visible()
    expect(panel).not_to_contain_text("▶")
    steps.shot(page, "agent-started")

    # Another reviewer edits the A2A refund's amount: the successor's history lists what it replaced.
    original = Proposal.objects.get(pk=a2a_id)
    edited = beside_the_browser(
        edit_proposal,
        original.id,
        reviewer_b,
        arguments={**original.action["arguments"], "amount": "10.00"},
        digest_seen=original.action_digest,
        note="partial refund",
        step_up=fresh_step_up(reviewer_b),
    )
    page.goto(f"/proposals/{edited.id}/")
    history = page.locator("section", has=page.locator("#h-history"))
    expect(history.get_by_role("link", name=re.compile("Refund EUR 12.99"))).to_be_visible()
    expect(history).to_contain_text("an earlier version of this request")
    expect(page.get_by_text("Likely duplicate.")).to_have_count(0)
    steps.shot(page, "edit-history")

    # Out of office, from the navigation.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Out of office").click()
    expect(page.get_by_role("heading", name="Out of office", level=1)).to_be_visible()
    expect(page.get_by_role("link", name="Out of office")).to_have_attribute("aria-current", "page")
    steps.shot(page, "out-of-office")


def test_compliance_reads_the_audit_page_and_the_metrics(
    new_page, steps, tenant, agent, refund_policy, requester, reviewer_a, compliance
):
    proposal = beside_the_browser(submit, agent)
    beside_the_browser(factories.vote, proposal, reviewer_a)
    page = new_page()
    signed_in(page, compliance)

    page.goto(f"/audit/{tenant.slug}/")
    install = page.locator("code", has_text="pip install")
    expect(install).to_contain_text("/audit/reviewer-verify/reviewer_verify-")
    expect(page.locator("main")).not_to_contain_text("pip install reviewer-verify")
    wheel_url = install.inner_text().removeprefix("pip install ").strip()
    assert httpx.get(wheel_url, timeout=30).status_code == 200  # what pip would fetch, no sign-in
    steps.shot(page, "audit")

    page.goto(f"/audit/{tenant.slug}/metrics/")
    empty_headings = page.evaluate(
        "[...document.querySelectorAll('th')].filter((th) => !th.textContent.trim()).length"
    )
    assert empty_headings == 0
    expect(page.get_by_role("columnheader", name="Policy version")).to_be_visible()
    expect(page.get_by_role("columnheader", name="Tool")).to_be_visible()
    per_day = page.locator("svg", has=page.locator("title", has_text="Proposals per day"))
    day_labels = per_day.locator("text[text-anchor=middle]").all_text_contents()
    assert day_labels[-1] == timezone.now().strftime("%m-%d")  # the latest day is labelled
    steps.shot(page, "metrics")


def test_a_tenant_admin_walks_the_group_and_policy_pages_and_a_dry_run(
    new_page, steps, tenant, agent, refund_policy, requester, reviewer_a, reviewer_b, admin_user
):
    beside_the_browser(grant_admin_site, tenant, admin_user)
    original = beside_the_browser(submit, agent, action=refund("1300", "75.00"), summary="Refund EUR 75.00")
    beside_the_browser(
        edit_proposal,
        original.id,
        reviewer_b,
        arguments={**original.action["arguments"], "amount": "30.00"},
        digest_seen=original.action_digest,
        note="partial refund",
        step_up=fresh_step_up(reviewer_b),
    )
    page = new_page()
    signed_in(page, admin_user)

    page.goto("/admin/")
    expect(page.locator("#site-name")).to_be_visible()
    steps.shot(page, "admin-home")
    page.get_by_role("link", name="Approver groups").click()
    page.get_by_role("link", name="finance", exact=False).first.click()
    expect(page.locator("#content")).to_contain_text("finance")
    steps.shot(page, "admin-group")

    page.goto("/admin/approvals/policy/")
    page.get_by_role("link", name="refunds").first.click()
    steps.shot(page, "admin-policy")
    page.goto(f"/admin/approvals/policyversion/{refund_policy.pk}/dry-run/")
    expect(page.get_by_role("columnheader", name="What it does")).to_be_visible()
    expect(page.locator("#result_list")).to_contain_text(
        "Refund EUR 30.00 · order:1300 (edited by a reviewer)"
    )
    expect(page.locator("#result_list")).not_to_contain_text("Refund EUR 75.00 (edited)")
    steps.shot(page, "admin-dry-run")


def _removed_from_the_tenant(tenant, user, admin) -> None:
    """What an admin's removal does (the admin's tenant page calls the same service): nothing but the
    membership's removal, whose own signal tells the person's open pages to re-check
    (approvals/live/invalidation.py)."""
    remove_tenant_membership(tenant, user, actor=admin)


def test_a_person_removed_while_their_page_is_open_keeps_no_decision_form(
    new_page, steps, tenant, agent, refund_policy, requester, reviewer_a, admin_user
):
    needs_shared_channel_layer()
    proposal = beside_the_browser(submit, agent)
    page = new_page()
    sign_in(page, reviewer_a)
    page.goto(f"/proposals/{proposal.id}/")
    wait_until_live(page)
    expect(page.locator("#decision form")).to_have_count(1)

    beside_the_browser(_removed_from_the_tenant, tenant, reviewer_a, admin_user)

    expect(page.locator("[data-live-status]")).to_have_attribute("data-state", "ended")
    expect(page.locator("#decision form")).to_have_count(0)
    expect(page.locator("#decision-bar button")).to_have_count(0)
    expect(page.locator("#decision")).to_contain_text("You no longer have access to this request")
    steps.shot(page, "access-ended")
