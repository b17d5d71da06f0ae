"""Reviewer's own headline of an action (approvals/policy/headline.py): written from the canonical
arguments, never from the agent's summary; look-alikes flagged; the agent's words checked against it."""

import re
from html import unescape

import pytest
from agents import function_tool
from django.urls import reverse
from langchain_core.tools import tool

from approvals.policy.headline import action_headline, summary_mismatch
from approvals.policy.history import target_identity
from reviewer_gate.describe import ToolDescription
from tests import factories
from tests.factories import verified_client

LOOKALIKE = "billing@p\u0430ypal.com"  # a Cyrillic "а"


def test_the_headline_names_the_tool_amount_target_and_recipient_from_the_arguments():
    action = factories.refund_action(order_id="1500", amount="4000.00")
    action["arguments"]["recipient"] = "billing@example.com"
    headline = action_headline(action)
    assert headline.text == "Refund EUR 4,000.00 · order:1500 · to billing@example.com"
    assert (headline.verb, headline.amount, headline.target) == ("Refund", "EUR 4,000.00", "order:1500")
    assert not headline.flagged


def test_without_a_target_the_headline_names_the_first_key_argument():
    action = {"tool": "files.delete_tree", "arguments": {"path": "/srv/data/customers/"}}
    assert action_headline(action).text == "Delete tree · path:/srv/data/customers/"
    assert action_headline({"tool": "status.read", "arguments": {}}).text == "Read"


def test_a_lookalike_recipient_is_flagged_in_the_headline():
    action = factories.refund_action()
    action["arguments"]["recipient"] = LOOKALIKE
    headline = action_headline(action)
    assert headline.flagged
    assert headline.warnings == [
        f"The recipient: “{LOOKALIKE}” mixes Cyrillic and Latin letters in one word: a look-alike?"
    ]


def test_a_hidden_character_in_the_target_is_written_out_in_the_plain_headline():
    action = {**factories.refund_action(), "target": "order:11\u202e82"}
    headline = action_headline(action)
    assert "order:11[U+202E]82" in headline.text
    assert headline.flagged


def test_the_agents_words_are_checked_against_the_amount_that_runs():
    action = factories.refund_action(order_id="1500", amount="4000.00")
    assert summary_mismatch("Refund EUR 4.00 for order 1500", action) == (
        "The agent's words name EUR 4.00; the action moves EUR 4,000.00"
    )
    assert summary_mismatch("Refund EUR 4,000.00 for order 1500", action) == ""
    assert summary_mismatch("Refund 4000.00 EUR for order 1500", action) == ""
    assert summary_mismatch("Refund €4000.00", action) == ""
    assert summary_mismatch("Refund USD 4000.00", action) == (
        "The agent's words name USD 4000.00; the action moves EUR 4,000.00"
    )
    assert summary_mismatch("Refund the customer", action) == ""  # names no amount: nothing to compare
    assert summary_mismatch("Refund order 1500", action, {"amount": "40.00"}) == (
        "The agent's words name EUR 40.00; the action moves EUR 4,000.00"
    )


# ---------------------------------------------------------------------------------------------------
# A proposal as the adapters build it: the currency from the tool description, the target as
# "order_id:7002". Every line names the currency, says the digest does not bind it, and spells the
# target as the target's history does.


@tool
def refund(order_id: str, amount: str) -> str:
    """Refund an order to the customer's card."""
    return "refunded"


@function_tool
def refund_order(order_id: str, amount: str) -> str:
    """Refund an order to the customer's card."""
    return "refunded"


DESCRIPTION = ToolDescription(name="payments.refund", currency="EUR", reversible=False)


def langgraph_fields() -> dict:
    """What reviewer_gate.langgraph.ReviewerToolNode sends for a refund call (its _run_approved)."""
    return DESCRIPTION.request_fields(
        refund.name,
        {"order_id": "7002", "amount": "22.00"},
        tool_text=refund.description,
        argument_order=tuple(refund.args),
        effect=f"runs the tool {refund.name}",
    )


def agents_sdk_fields() -> dict:
    """What reviewer_gate.openai_agents.ReviewerApprovals sends for a refund call (its _decide)."""
    return DESCRIPTION.request_fields(
        refund_order.name,
        {"order_id": "7002", "amount": "22.00"},
        tool_text=refund_order.description or "",
        argument_order=tuple(refund_order.params_json_schema["properties"]),  # the schema's order
        effect=f"runs the tool {refund_order.name}",
    )


def found(pattern: str, html: str) -> str:
    match = re.search(pattern, html, re.S)
    assert match is not None, pattern
    return match.group(0)


def text_of(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


@pytest.mark.django_db
@pytest.mark.parametrize("fields", [langgraph_fields, agents_sdk_fields], ids=["langgraph", "agents-sdk"])
def test_an_adapters_proposal_names_its_currency_on_every_line_and_the_target_as_history_does(
    fields, agent, refund_policy, requester, reviewer_a
):
    built = fields()
    assert built["action"]["target"] == "order_id:7002" and "currency" not in built["action"]["arguments"]
    proposal = factories.submit(
        agent,
        action=built["action"],
        summary=built["summary"],
        consequences=built["consequences"],
    )
    assert target_identity(proposal.action) == "order:7002"  # the history's spelling
    client = verified_client(reviewer_a)
    html = client.get(reverse("approvals:detail", kwargs={"proposal_id": proposal.id})).content.decode()
    heading = text_of(found(r"<h1.*?</h1>", html))
    assert heading == "Refund EUR 22.00 · order:7002"
    note = "EUR (stated by the tool description, not part of the approved action)"
    how_much = text_of(found(r"<dt>How much</dt>.*?</dd>", html))
    assert how_much == f"How much EUR 22.00 Currency: {note}"
    assert f"Refund EUR 22.00 · order:7002 Currency: {note}" in text_of(html)
    approve = text_of(found(r'<button[^>]*value="approve".*?</button>', html))
    assert approve == "✓ Approve refund of EUR 22.00"
    page = text_of(html)
    assert (
        page.count("order_id:7002") == 1 and '"target":"order_id:7002"' in page
    )  # the canonical action only
    assert "To whom / what order:7002" in page
    # (The agent's words, quoted, keep the adapter's own spelling: "order_id 7002, amount EUR 22.00".)

    queue = text_of(client.get(reverse("approvals:queue")).content.decode())
    assert "Refund EUR 22.00 · order:7002" in queue and note in queue


def test_a_currency_in_the_arguments_is_bound_and_needs_no_note():
    action = factories.refund_action(order_id="1500", amount="40.00", currency="EUR")
    headline = action_headline(action, {"currency": "USD", "tool": "refund"})
    assert (headline.amount, headline.currency_note) == ("EUR 40.00", "")


def test_the_headline_spells_the_target_as_the_history_does_however_the_agent_wrote_it():
    for target in ("order_id:1500", "order_id=1500", "order:1500"):
        action = {**factories.refund_action(order_id="1500"), "target": target}
        assert action_headline(action).target == "order:1500" == target_identity(action)
    only_argument = {"tool": "payments.refund", "arguments": {"order_id": "1500", "amount": "1.00"}}
    assert action_headline(only_argument).target == "order:1500"
