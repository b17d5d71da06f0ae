"""How the proposal page says what one vote needs: once, in words that read as a sentence."""

import re

import pytest
from django.urls import reverse

from tests.factories import submit, verified_client


@pytest.mark.django_db
def test_the_page_says_once_that_each_vote_needs_a_fresh_code(agent, refund_policy, reviewer_a):
    proposal = submit(agent)

    page = verified_client(reviewer_a).get(reverse("approvals:detail", kwargs={"proposal_id": proposal.id}))

    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", page.content.decode()))
    assert "Each vote needs a fresh one-time code." in text
    assert "with every vote" not in text
