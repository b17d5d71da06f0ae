"""The proposal page as a first-time reviewer reads it: a look-alike said once, "To whom" from the
action, break glass only where it adds something, the request's own earlier versions in its history,
an agent's structured fact in words, the panel after the agent started, and the way to out of office."""

import re
from html import unescape

import pytest
from django.urls import reverse

from approvals.models import Decision
from approvals.services.decisions import consume_decision
from approvals.services.votes import edit_proposal, request_info
from tests import factories
from tests.approvals.test_break_glass import RULE
from tests.factories import fresh_step_up, submit, verified_client, vote

pytestmark = pytest.mark.django_db

LOOKALIKE = "billing@p\u0430ypal.com"  # a Cyrillic "а"
WARNING = "mixes Cyrillic and Latin letters"


def page(user, proposal) -> str:
    response = verified_client(user).get(reverse("approvals:detail", kwargs={"proposal_id": proposal.id}))
    assert response.status_code == 200
    return unescape(response.content.decode())


def above_the_action(html: str) -> str:
    """The heading and the consequence: what the page shows before "The action" table."""
    return html[html.index('<header class="proposal__head">') : html.index('id="h-arguments"')]


def words(html: str) -> str:
    return re.sub(r"<[^>]+>", "", html)


def lookalike_refund(agent):
    action = factories.refund_action()
    action["arguments"]["recipient"] = LOOKALIKE
    return submit(agent, action=action, summary="Refund EUR 40.00 to PayPal billing")


def test_a_lookalike_recipient_is_explained_once_above_the_action_and_never_in_doubled_quotes(
    agent, refund_policy, requester, reviewer_a
):
    html = page(reviewer_a, lookalike_refund(agent))

    top = above_the_action(html)
    assert top.count(WARNING) == 1  # "Check the headline before you decide", under the heading
    assert f"Check the headline before you decide: The recipient: “{LOOKALIKE}” {WARNING}" in words(top)
    assert "““" not in html and "””" not in html
    # The heading and "What happens" mark the value where it stands, without saying it again.
    assert top.count("agent-text agent-text--flagged") >= 3
    # The argument's row says it beside the value, as the exact action (closed, at the end) does.
    action_table = html[html.index('id="h-arguments"') : html.index('id="h-diff"')]
    assert action_table.count(WARNING) == 1


def test_to_whom_reads_the_target_and_recipient_from_the_action_and_flags_a_lookalike(
    agent, refund_policy, requester, reviewer_a
):
    html = page(reviewer_a, lookalike_refund(agent))

    row = html[html.index("<dt>To whom / what</dt>") :]
    row = row[: row.index("</div>")]
    assert (
        "order:1182" in row
        and f'to <span class="value"><bdi class="agent-text agent-text--flagged">{LOOKALIKE}' in row
    )
    assert "check it: see the warning under the heading" in row
    assert "Not stated by the agent" not in row


def test_to_whom_without_a_target_or_recipient_says_the_action_names_none(
    tenant, agent, requester, reviewer_a
):
    factories.make_policy(tenant, "reports", tool_pattern="reports.*")
    proposal = submit(agent, action={"tool": "reports.run", "arguments": {"period": "2026-11"}})

    row = page(reviewer_a, proposal)
    row = row[row.index("<dt>To whom / what</dt>") :]
    assert row[: row.index("</div>")].endswith('<span class="muted">Not named in the action</span></dd>')


@pytest.fixture
def glass_policy(tenant, requester, reviewer_a, reviewer_b, reviewer_c):
    def make(count):
        return factories.make_policy(
            tenant,
            f"refunds-{count}",
            tool_pattern="payments.refund",
            thresholds=[{"group": "finance", "count": count}],
            break_glass=RULE,
        )

    return make


def test_break_glass_is_not_offered_where_ones_own_approval_releases_it(
    agent, glass_policy, reviewer_a, reviewer_b
):
    glass_policy(1)
    assert "Emergency: break glass" not in page(reviewer_a, submit(agent))


def test_break_glass_is_offered_while_more_than_one_approval_is_missing_and_not_after(
    agent, glass_policy, reviewer_a, reviewer_b
):
    glass_policy(2)
    proposal = submit(agent)
    assert "Emergency: break glass" in page(reviewer_a, proposal)

    vote(proposal, reviewer_b)

    html = page(reviewer_a, proposal)
    assert "Approve refund of" in html and "Emergency: break glass" not in html


def history_panel(html: str) -> str:
    panel = html[html.index('id="h-history"') :]
    return panel[: panel.index("</section>")]


def test_an_edits_history_lists_the_proposal_it_replaced_as_an_earlier_version(
    agent, refund_policy, requester, reviewer_a, reviewer_b
):
    original = submit(agent)
    edited = edit_proposal(
        original.id,
        reviewer_b,
        arguments={**original.action["arguments"], "amount": "30.00"},
        digest_seen=original.action_digest,
        note="partial refund",
        step_up=fresh_step_up(reviewer_b),
    )

    panel = history_panel(page(reviewer_a, edited))

    assert reverse("approvals:detail", kwargs={"proposal_id": original.id}) in panel
    assert "an earlier version of this request" in panel
    assert "Likely duplicate" not in page(reviewer_a, edited)


def test_an_answers_history_lists_the_question_it_answers(agent, refund_policy, requester, reviewer_a):
    asked = submit(agent, task_id="task-asked", request_id="first")
    request_info(
        asked.id,
        reviewer_a,
        question="Which order?",
        digest_seen=asked.action_digest,
        step_up=fresh_step_up(reviewer_a),
    )
    answer = submit(agent, task_id="task-asked", request_id="second", supersedes="first")

    panel = history_panel(page(reviewer_a, answer))

    assert reverse("approvals:detail", kwargs={"proposal_id": asked.id}) in panel
    assert "an earlier version of this request" in panel


def test_an_agents_structured_fact_reads_as_words_under_a_label_with_its_acronym(
    agent, refund_policy, requester, reviewer_a
):
    client_identity = {"name": "claude-code", "title": "Claude Code", "version": "1.2"}
    proposal = submit(agent, consequences={"mcp_client": client_identity, "mcp_server": "payments"})

    html = page(reviewer_a, proposal)

    assert re.search(r"<dt>(<bdi[^>]*>)?MCP client(</bdi>)?</dt>", html)
    assert re.search(r"<dt>(<bdi[^>]*>)?MCP server(</bdi>)?</dt>", html)
    assert "Name: claude-code · Title: Claude Code · Version: 1.2" in html
    assert '{"name"' not in html


def test_after_the_agent_started_the_approver_reads_their_vote_and_opens_the_compensation_form_if_needed(
    agent, refund_policy, requester, reviewer_a
):
    proposal = submit(agent)
    vote(proposal, reviewer_a)
    decision = Decision.objects.get(proposal=proposal)
    consume_decision(agent, decision.jti, rev=decision.rev)

    html = page(reviewer_a, proposal)
    panel = html[html.index('id="decision"') :]
    panel = panel[: panel.index("</section>")]

    assert "You approved this at" in panel
    assert '<details class="compensation">' in panel  # closed: nothing required to land on
    assert "<summary>If it must be undone, record how</summary>" in panel
    assert "▶" not in panel


def test_the_main_navigation_leads_to_out_of_office(reviewer_a, tenant):
    html = unescape(verified_client(reviewer_a).get("/").content.decode())
    nav = html[html.index('<nav aria-label="Main">') : html.index("</nav>")]
    assert f'href="{reverse("approvals:out_of_office")}"' in nav and "Out of office" in nav


def test_the_agents_other_amount_is_followed_by_its_semicolon_with_no_space_before_it(
    agent, refund_policy, requester, reviewer_a
):
    proposal = submit(
        agent,
        action=factories.refund_action(amount="4000.00"),
        consequences={"amount": "4.00", "currency": "EUR"},
        summary="Refund EUR 4.00 for order 1182",
    )

    shown = words(page(reviewer_a, proposal))

    assert "The agent's description says EUR 4.00; the action says the amount above." in shown
    assert "EUR 4.00 ;" not in shown
