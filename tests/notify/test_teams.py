"""Teams: a new proposal posts an Adaptive Card with the link to its page; how it ended follows as a second
card (an incoming webhook cannot edit a card). Teams cannot be reached from here: a loopback stand-in
of the Workflows webhook (tests/notify/teams_standin.py) takes the posts."""

import json

import pytest

from approvals.worker.loop import Worker
from tests import factories
from tests.factories import submit

pytestmark = pytest.mark.django_db


def test_a_proposal_posts_a_card_with_the_link_and_then_how_it_ended(
    settings, agent, refund_policy, channel, requester, reviewer_a
):
    settings.REVIEWER_ISSUER = "https://reviewer.example.test"
    proposal = submit(agent, summary="Refund [click](https://evil.example) EUR 40.00")
    Worker().tick()
    Worker().tick()
    (card,) = channel.cards
    shown = json.dumps(card)
    assert "Approval requested" in shown and "payments.refund" in shown and "EUR 40.00" in shown
    (action,) = card["actions"]
    assert action == {
        "type": "Action.OpenUrl",
        "title": "Review in Reviewer",
        "url": f"https://reviewer.example.test/proposals/{proposal.id}/",
    }
    summary = card["body"][1]
    assert summary["type"] == "RichTextBlock" and summary["inlines"][0]["type"] == "TextRun"  # no markdown
    factories.vote(proposal, reviewer_a)
    Worker().tick()
    Worker().tick()
    assert len(channel.cards) == 2
    assert "Request closed" in json.dumps(channel.cards[1]) and "Approved by Alice" in json.dumps(
        channel.cards[1]
    )
    assert proposal.action_digest not in json.dumps(channel.cards)


def test_a_channel_that_is_down_is_retried(agent, refund_policy, channel, requester):
    from datetime import timedelta

    from django.utils import timezone

    submit(agent)
    channel.status = 503
    Worker().tick()
    assert channel.cards == []
    channel.status = 202
    Worker().tick(now=timezone.now() + timedelta(minutes=5))
    assert len(channel.cards) == 1
