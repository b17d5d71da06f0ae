"""Reviewer's own headline of an action (approvals/policy/headline.py): written from the canonical
arguments, never from the agent's summary; look-alikes flagged; the agent's words checked against it."""

from approvals.policy.headline import action_headline, summary_mismatch
from tests import factories

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
    assert action_headline(action).text == "Delete tree · path /srv/data/customers/"
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
