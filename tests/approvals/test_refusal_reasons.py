"""A refusal says why (expired at …, superseded by …, already decided by …) on the form, the
socket and the API, instead of "No decision is open here."."""

import json
from datetime import timedelta

import pytest
import time_machine
from channels.db import database_sync_to_async
from django.urls import reverse

from accounts.stepup import step_up_for
from approvals.services.decisions import consume_decision, revoke_decision
from approvals.services.votes import cast_vote, edit_proposal
from lib.errors import VoteRefused
from tests import factories
from tests.approvals.test_consumers import connected, proposal_path, reply_to, sign_in, vote
from tests.factories import approve, submit, totp_code, verified_client

AUTH = {"HTTP_AUTHORIZATION": "Bearer api-secret"}


def post_vote(user, proposal, verdict="approve", **extra):
    return verified_client(user).post(
        reverse("approvals:decide", kwargs={"proposal_id": proposal.id}),
        {"action": verdict, "digest": proposal.action_digest, "otp_code": totp_code(user), **extra},
    )


def when(moment) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC"


@pytest.mark.django_db
def test_a_vote_on_a_rejected_proposal_says_who_rejected_it_and_why(
    agent, refund_policy, requester, reviewer_a, reviewer_b
):
    proposal = submit(agent)
    post_vote(reviewer_a, proposal, "reject", reason="no proof of loss")

    response = post_vote(reviewer_b, proposal)

    page = response.content.decode()
    assert response.status_code in {403, 409}
    assert "already decided: rejected by Alice at" in page and "no proof of loss" in page


@pytest.mark.django_db
def test_a_second_vote_from_an_old_tab_says_why_above_the_panel_that_replaced_the_form(
    agent, tenant, requester, reviewer_a, reviewer_b
):
    """After a refusal the page is read again and shows this person's panel as it is now ("You
    approved this"), not the vote form they posted: the refusal is still shown, above that panel, so
    they learn why nothing was cast."""
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 2}]
    )
    proposal = submit(agent)
    post_vote(reviewer_a, proposal)  # one of two approvals

    response = post_vote(reviewer_a, proposal)  # the same form again, from another tab

    page = response.content.decode()
    assert response.status_code in {403, 409}
    assert "You approved this" in page
    assert 'role="alert"' in page and "you already voted on this proposal" in page


@pytest.mark.django_db
def test_a_vote_that_lost_the_race_to_an_approval_the_agent_already_acted_on_says_so(
    agent, refund_policy, requester, reviewer_a, reviewer_b
):
    """The lost race of two reviewers when the agent is quick: the page re-read after the refusal shows
    "The agent has started the work", and above it why the vote was not cast."""
    proposal, decision = approve(agent, reviewer_a)  # Bob's form was loaded before this
    consume_decision(agent, decision.jti, rev=decision.rev)

    response = post_vote(reviewer_b, proposal)

    page = response.content.decode()
    assert response.status_code in {403, 409}
    assert "The agent has started the work" in page
    assert (
        'role="alert"' in page
        and "No decision is open here: it was already decided: approved by Alice" in page
    )


@pytest.mark.django_db
def test_a_vote_after_expiry_says_when_it_expired(agent, refund_policy, requester, reviewer_a):
    proposal = submit(agent)
    with time_machine.travel(proposal.expires_at + timedelta(seconds=5), tick=False):
        response = post_vote(reviewer_a, proposal)
    assert f"it expired at {when(proposal.expires_at)}" in response.content.decode()
    # The page itself says it too, not just the refusal.
    page = verified_client(reviewer_a).get(f"/proposals/{proposal.id}/").content.decode()
    assert f"No decision is open here: it expired at {when(proposal.expires_at)}" in page


@pytest.mark.django_db
def test_a_vote_on_an_edited_proposal_names_its_successor(
    agent, refund_policy, requester, reviewer_a, reviewer_b
):
    proposal = submit(agent)
    successor = edit_proposal(
        proposal.id,
        reviewer_a,
        arguments={**proposal.action["arguments"], "amount": "30.00"},
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
    )
    with pytest.raises(VoteRefused) as refused:
        cast_vote(
            proposal.id,
            reviewer_b,
            verdict="approve",
            digest_seen=proposal.action_digest,
            step_up=step_up_for(reviewer_b, totp_code(reviewer_b)),
        )
    assert refused.value.code == "not_open"
    assert f"superseded by proposal {successor.id}" in refused.value.message
    assert "an edit by Alice" in refused.value.message


@pytest.mark.django_db
def test_consume_of_a_revoked_decision_says_who_revoked_it_when_and_why(
    client, agent, refund_policy, requester, reviewer_a
):
    proposal, decision = approve(agent, reviewer_a)
    revoke_decision(proposal.id, reviewer_a, reason="wrong customer")
    response = client.post(
        f"/api/v1/decisions/{decision.jti}/consume",
        json.dumps({"rev": decision.rev}),
        content_type="application/json",
        **AUTH,
    )
    error = response.json()["error"]
    assert response.status_code == 409 and error["code"] == "revoked"
    assert "revoked at" in error["message"] and "by Alice: wrong customer" in error["message"]


@pytest.mark.django_db(transaction=True)
async def test_a_vote_over_the_socket_on_a_decided_proposal_says_who_decided_it(
    agent, refund_policy, requester, reviewer_a, reviewer_b
):
    proposal = await database_sync_to_async(submit)(agent)
    await database_sync_to_async(post_vote)(reviewer_a, proposal)  # the quorum (1 finance) is met
    communicator = await connected(proposal_path(proposal), await database_sync_to_async(sign_in)(reviewer_b))
    code = await database_sync_to_async(totp_code)(reviewer_b)
    reply = await reply_to(communicator, vote(proposal, otp_code=code))
    assert reply["type"] == "error" and reply["error"]["code"] == "not_open"
    assert "already decided: approved by Alice at" in reply["error"]["message"]
    await communicator.disconnect()
