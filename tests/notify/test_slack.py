"""Slack: a new proposal posts one message that follows the proposal in place; chat decisions go through
the same vote as the page, only where the policy allows them; every request from Slack is verified.

Slack cannot be reached from here, so its Web API is the local stand-in tests/notify/slack_standin.py,
called by Reviewer's real client (slack_sdk); Slack's requests to Reviewer are built here and signed
with Slack's real algorithm (slack_sdk's SignatureVerifier)."""

import json
import time
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from approvals.models import Proposal, Vote
from approvals.models.notifications import SlackIdentity, SlackLinkRequest
from approvals.services import slack_links
from approvals.services.reconcile import apply_task_state, expire_due
from approvals.worker.loop import Worker
from audit.models import AuditEvent, Verb
from lib.errors import ActionRefused
from tests import factories
from tests.factories import totp_code, trail_name
from tests.notify.slack_requests import FINANCE_CHANNEL, button, link, signed_post, submission
from tests.notify.slack_standin import BOT_TOKEN

pytestmark = pytest.mark.django_db


@pytest.fixture
def chat_policy(tenant):
    """Refunds need two finance approvals; the policy lets them be given from chat."""
    return factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        thresholds=[{"group": "finance", "count": 2}],
        notifications={"chat_decisions": True},
        reversibility="R1",
    )


def submit(agent, **kwargs):
    """A refund the agent states is reversible (R1 with the policy's class): chat may decide those; an
    irreversible one (R3, what the refund factory states by default) never from chat."""
    kwargs.setdefault(
        "consequences", {"effect": "Money leaves the merchant account", "reversible": True, "amount": "40.00"}
    )
    return factories.submit(agent, **kwargs)


def texts(blocks) -> str:
    return json.dumps(blocks)


def test_a_new_proposal_posts_one_message_with_reviewers_summary_and_a_link(
    settings, agent, chat_policy, workspace, slack, requester, reviewer_a
):
    settings.REVIEWER_ISSUER = "https://reviewer.example.test"
    proposal = submit(agent, summary="Refund EUR 40.00 to order 1182")
    assert slack.calls == []  # nothing inside the request: the worker posts
    Worker().tick()
    Worker().tick()  # nothing changed: no second message, no update
    (posted,) = slack.calls_to("chat.postMessage")
    assert slack.calls_to("chat.update") == []
    assert posted["channel"] == FINANCE_CHANNEL
    assert posted["unfurl_links"] is False and posted["unfurl_media"] is False
    shown = texts(posted["blocks"])
    for fact in (
        "Approval requested: Refund EUR 40.00 \\u00b7 order:1182",  # the page's headline (json-escaped)
        "Action: payments.refund",
        "Refund EUR 40.00 to order 1182",
        "Amount: EUR 40.00",
        "Target: order:1182",
        "Reversibility: ",
        "Asked by: Refund Demo for Requester",
        "Waiting for review: 0 of 2 approvals",
    ):
        assert fact in shown
    review = posted["blocks"][-1]["elements"][0]
    assert review["text"]["text"] == "Review in Reviewer"
    assert review["url"] == f"https://reviewer.example.test/proposals/{proposal.id}/"
    assert proposal.action_digest not in json.dumps(posted)  # no digest, token or code in the message
    assert BOT_TOKEN not in json.dumps(posted)


def test_the_message_follows_votes_and_the_decision_in_place(
    agent, chat_policy, workspace, slack, requester, reviewer_a, reviewer_b
):
    proposal = submit(agent)
    Worker().tick()
    (posted,) = slack.calls_to("chat.postMessage")
    factories.vote(proposal, reviewer_a)
    Worker().tick()
    (first_update,) = slack.calls_to("chat.update")
    assert "Waiting for review: 1 of 2 approvals" in texts(first_update["blocks"])
    factories.vote(proposal, reviewer_b)
    Worker().tick()
    last = slack.calls_to("chat.update")[-1]
    assert "Approved by Alice, Bob." in texts(last["blocks"])
    assert "reviewer_approve" not in texts(last["blocks"])  # no buttons on a decided request
    key = (last["channel"], last["ts"])
    assert slack.messages[key]["blocks"] == last["blocks"]  # one message, updated in place
    assert len(slack.calls_to("chat.postMessage")) == 1


def shown_now(slack, proposal) -> str:
    """What the proposal's Slack message shows now (as the stand-in holds it after every update)."""
    from approvals.models.notifications import SlackPost

    post = SlackPost.objects.get(proposal=proposal)
    return texts(slack.messages[(post.posted_channel, post.ts)]["blocks"])


def test_withdrawal_and_expiry_update_the_message(agent, chat_policy, workspace, slack, requester):
    withdrawn = submit(agent, action=factories.refund_action(order_id="77"))
    expiring = submit(agent)
    Worker().tick()
    assert "Waiting for review" in shown_now(slack, withdrawn)
    apply_task_state(agent, withdrawn.task_id, "TASK_STATE_CANCELED")  # the agent gave the task up
    Worker().tick()
    assert "Withdrawn (cancelled): no decision is open here." in shown_now(slack, withdrawn)
    assert "Waiting for review" in shown_now(slack, expiring)
    with time_machine.travel(timezone.now() + timedelta(hours=2)):
        expire_due()
        Worker().tick()
    assert "nobody decided it in time, nothing was released" in shown_now(slack, expiring)
    assert "reviewer_approve" not in shown_now(slack, expiring)
    assert len(slack.calls_to("chat.postMessage")) == 2


def test_a_chat_approval_with_a_fresh_code_counts_toward_the_quorum_like_a_page_vote(
    client, agent, chat_policy, workspace, slack, requester, reviewer_a, reviewer_b
):
    proposal = submit(agent)
    link(workspace, reviewer_a, "U0ALICE")
    response = signed_post(client, button(proposal, "U0ALICE", "reviewer_approve"))
    assert response.status_code == 200
    (opened,) = slack.calls_to("views.open")
    modal = opened["view"]
    assert opened["trigger_id"] == "trigger-1"
    assert {b.get("block_id") for b in modal["blocks"]} >= {"reason", "code"}
    response = signed_post(
        client, submission(modal, "U0ALICE", reason="ticket checked", code=totp_code(reviewer_a))
    )
    assert response.json() == {"response_action": "clear"}
    vote = Vote.objects.get(proposal=proposal)
    assert (vote.voter, vote.verdict, vote.auth_method, vote.reason) == (
        reviewer_a,
        "approve",
        "totp",
        "ticket checked",
    )
    assert vote.page_hash.startswith("slack:")
    cast = AuditEvent.objects.get(verb=Verb.VOTE_CAST, subject=f"proposal:{proposal.id}")
    assert cast.actor == trail_name("reviewer_a") and cast.data["auth"]["method"] == "totp"
    # The second approval, on the page, completes the same quorum.
    factories.vote(proposal, reviewer_b)
    proposal.refresh_from_db()
    assert proposal.state == "approved"
    assert sorted(a["sub"] for a in _approvers(proposal)) == sorted(
        [trail_name("reviewer_a"), trail_name("reviewer_b")]
    )


def _approvers(proposal):
    import jwt

    return jwt.decode(proposal.decision.token, options={"verify_signature": False})["approvers"]


def test_a_chat_vote_without_a_code_or_with_a_used_one_is_refused_as_on_the_page(
    client, agent, chat_policy, workspace, slack, requester, reviewer_a
):
    proposal = submit(agent)
    link(workspace, reviewer_a, "U0ALICE")
    signed_post(client, button(proposal, "U0ALICE", "reviewer_approve"))
    modal = slack.calls_to("views.open")[0]["view"]
    response = signed_post(client, submission(modal, "U0ALICE", code=""))
    assert response.json()["response_action"] == "errors"
    assert "fresh one-time code" in response.json()["errors"]["code"]
    code = totp_code(reviewer_a)
    from accounts.stepup import verify_code

    assert verify_code(reviewer_a, code) == "totp"
    response = signed_post(client, submission(modal, "U0ALICE", code=code))
    assert "not valid" in response.json()["errors"]["code"]
    assert not Vote.objects.filter(proposal=proposal).exists()
    assert AuditEvent.objects.filter(verb=Verb.STEP_UP_FAILED, subject=f"proposal:{proposal.id}").count() == 2


def test_a_chat_rejection_without_a_reason_keeps_its_code_for_the_corrected_modal(
    client, agent, chat_policy, workspace, slack, requester, reviewer_a
):
    """Slack requires the reason field of a rejection but takes blanks: Reviewer refuses them on the
    reason before it checks the code, so the same code decides once the reason is written."""
    proposal = submit(agent)
    link(workspace, reviewer_a, "U0ALICE")
    signed_post(client, button(proposal, "U0ALICE", "reviewer_reject"))
    modal = slack.calls_to("views.open")[0]["view"]
    code = totp_code(reviewer_a)
    response = signed_post(client, submission(modal, "U0ALICE", reason="   ", code=code))
    assert response.json() == {
        "response_action": "errors",
        "errors": {"reason": "a rejection needs a reason"},
    }
    response = signed_post(client, submission(modal, "U0ALICE", reason="duplicate refund", code=code))
    assert response.json() == {"response_action": "clear"}
    proposal.refresh_from_db()
    assert proposal.state == "rejected"
    assert not AuditEvent.objects.filter(verb=Verb.STEP_UP_FAILED).exists()


def test_a_chat_vote_refused_by_policy_leaves_the_code_unchecked(
    client, tenant, agent, workspace, slack, requester, reviewer_a
):
    """A forged submission where chat may not decide is refused before the code is looked at: the code
    still works on the page."""
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund")
    proposal = submit(agent)
    link(workspace, reviewer_a, "U0ALICE")
    forged = {
        "callback_id": "reviewer_decide",
        "private_metadata": json.dumps(
            {"proposal": str(proposal.id), "verdict": "approve", "digest": proposal.action_digest}
        ),
    }
    code = totp_code(reviewer_a)
    response = signed_post(client, submission(forged, "U0ALICE", code=code))
    assert "does not allow decisions from chat" in response.json()["errors"]["code"]
    from accounts.stepup import verify_code

    assert verify_code(reviewer_a, code) == "totp"  # not spent by the refused submission


def test_the_requester_cannot_approve_their_own_request_from_chat(
    client, agent, chat_policy, workspace, slack, requester
):
    proposal = submit(agent)
    link(workspace, requester, "U0REQ")
    signed_post(client, button(proposal, "U0REQ", "reviewer_approve"))
    modal = slack.calls_to("views.open")[0]["view"]
    response = signed_post(client, submission(modal, "U0REQ", code=totp_code(requester)))
    assert "someone else must decide it" in response.json()["errors"]["code"]
    assert not Vote.objects.filter(proposal=proposal).exists()


@pytest.mark.parametrize(
    "policy_fields",
    [
        {},  # the policy does not say chat may decide
        {"notifications": {"chat_decisions": True}, "reversibility": "R3"},  # irreversible: never from chat
        {
            "notifications": {"chat_decisions": True},
            "step_up": "passkey",
        },  # a passkey cannot be given in chat
    ],
    ids=["not-allowed", "irreversible", "passkey"],
)
def test_chat_decisions_are_refused_where_the_policy_does_not_allow_them(
    client, tenant, agent, workspace, slack, requester, reviewer_a, policy_fields
):
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund", **policy_fields)
    proposal = submit(agent)
    Worker().tick()
    (posted,) = slack.calls_to("chat.postMessage")
    assert "reviewer_approve" not in texts(posted["blocks"])  # no Approve / Reject buttons
    link(workspace, reviewer_a, "U0ALICE")
    signed_post(client, button(proposal, "U0ALICE", "reviewer_approve"))
    (notice,) = slack.calls_to("views.open")
    assert "does not allow decisions from chat" in texts(notice["view"])
    forged = {
        "callback_id": "reviewer_decide",
        "private_metadata": json.dumps(
            {"proposal": str(proposal.id), "verdict": "approve", "digest": proposal.action_digest}
        ),
    }
    response = signed_post(client, submission(forged, "U0ALICE", code=totp_code(reviewer_a)))
    assert "does not allow decisions from chat" in response.json()["errors"]["code"]
    assert not Vote.objects.filter(proposal=proposal).exists()
    assert (
        AuditEvent.objects.filter(verb=Verb.SLACK_REQUEST_REFUSED, data__code="chat_decisions_off").count()
        == 2
    )


def test_unsigned_forged_stale_and_replayed_requests_are_refused(
    client, agent, chat_policy, workspace, slack, requester, reviewer_a
):
    proposal = submit(agent)
    link(workspace, reviewer_a, "U0ALICE")
    payload = button(proposal, "U0ALICE", "reviewer_approve")
    assert signed_post(client, payload, headers={}).status_code == 401  # unsigned
    assert signed_post(client, payload, secret="not-the-secret").status_code == 401  # forged
    assert signed_post(client, payload, timestamp=int(time.time()) - 600).status_code == 401  # stale
    stamp = int(time.time())
    assert signed_post(client, payload, timestamp=stamp).status_code == 200
    assert signed_post(client, payload, timestamp=stamp).status_code == 401  # the same request again
    assert len(slack.calls_to("views.open")) == 1  # only the one genuine click did anything
    codes = list(
        AuditEvent.objects.filter(verb=Verb.SLACK_REQUEST_REFUSED)
        .order_by("at")
        .values_list("data__code", flat=True)
    )
    assert codes == ["bad_signature", "bad_signature", "bad_signature", "replayed"]


def test_an_unlinked_slack_user_gets_a_one_time_link_the_person_confirms_in_reviewer(
    client, settings, agent, chat_policy, workspace, slack, requester, reviewer_a, reviewer_b
):
    settings.REVIEWER_ISSUER = "https://reviewer.example.test"
    proposal = submit(agent)
    signed_post(client, button(proposal, "U0ALICE", "reviewer_approve"))
    (notice,) = slack.calls_to("views.open")
    text = texts(notice["view"])
    assert "https://reviewer.example.test/slack/link/" in text
    token = text.split("/slack/link/", 1)[1].split("/", 1)[0]
    assert SlackLinkRequest.objects.get().token_hash != token  # stored hashed
    page = factories.verified_client(reviewer_a)
    shown = page.get(f"/slack/link/{token}/")
    assert shown.status_code == 200 and b"U0ALICE" in shown.content
    assert not SlackIdentity.objects.exists()  # opening the link links nothing
    page.post(f"/slack/link/{token}/")
    identity = SlackIdentity.objects.get()
    assert (identity.slack_user_id, identity.user) == ("U0ALICE", reviewer_a)
    assert AuditEvent.objects.filter(verb=Verb.SLACK_LINKED, actor=trail_name("reviewer_a")).exists()
    # The link works once: another person cannot take it afterwards.
    other = factories.verified_client(reviewer_b)
    assert other.get(f"/slack/link/{token}/").status_code == 410
    other.post(f"/slack/link/{token}/")
    assert SlackIdentity.objects.count() == 1


def test_a_link_expires(agent, workspace, reviewer_a):
    token = slack_links.offer_link(workspace, "U0LATE")
    with time_machine.travel(timezone.now() + timedelta(seconds=slack_links.LINK_SECONDS + 1)):
        with pytest.raises(ActionRefused) as refused:
            slack_links.confirm_link(token, actor=reviewer_a)
    assert refused.value.code == "link_invalid"


def test_agent_text_reaches_slack_as_plain_text_with_hidden_characters_written_out(
    agent, chat_policy, workspace, slack, requester
):
    submit(agent, summary="Refund <!channel> <https://evil.example|click> \u202eevil")
    Worker().tick()
    (posted,) = slack.calls_to("chat.postMessage")
    summary = posted["blocks"][1]["text"]
    assert summary["type"] == "plain_text"  # Slack renders no mention, link or markup in it
    assert "[U+202E]" in summary["text"] and "\u202e" not in json.dumps(posted, ensure_ascii=False)
    assert "<!channel>" not in posted["text"]  # the notification text is escaped
    assert Proposal.objects.count() == 1


def test_a_group_mapped_to_dm_messages_each_linked_reviewer_and_updates_there(
    agent, chat_policy, workspace, slack, requester, reviewer_a, reviewer_b
):
    workspace.channels = {"finance": "dm"}
    workspace.save(update_fields=["channels"])
    link(workspace, reviewer_a, "U0ALICE")
    link(workspace, reviewer_b, "U0BOB")
    link(workspace, requester, "U0REQ")  # the requester is in finance too, but never asked
    proposal = submit(agent)
    Worker().tick()
    assert sorted(p["channel"] for p in slack.calls_to("chat.postMessage")) == ["U0ALICE", "U0BOB"]
    factories.vote(proposal, reviewer_a)
    Worker().tick()
    assert sorted(u["channel"] for u in slack.calls_to("chat.update")) == ["D0ALICE", "D0BOB"]


def test_a_reminder_is_a_reply_in_the_messages_thread(tenant, agent, workspace, slack, requester, reviewer_a):
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", ttl_seconds=1000, notifications={"reminders": [50]}
    )
    proposal = submit(agent)
    Worker().tick()
    ((_, ts),) = slack.messages  # the one message the worker posted
    halfway = proposal.created_at + (proposal.expires_at - proposal.created_at) / 2 + timedelta(seconds=1)
    with time_machine.travel(halfway, tick=False):
        Worker().tick()
    replies = [p for p in slack.calls_to("chat.postMessage") if p.get("thread_ts")]
    assert [r["thread_ts"] for r in replies] == [ts]
    assert replies[0]["text"].startswith("Reminder: this request expires at")


def test_a_grant_nearing_its_expiry_is_a_reply_in_its_requests_thread(
    tenant, agent, workspace, slack, reviewer_a, reviewer_b, settings
):
    """Recertification goes where the chase goes: the approvers are asked in the Slack thread of the
    grant's request too, in Reviewer's words."""
    from approvals.notify import grant_renewals
    from approvals.services.grants import ask_for_renewals
    from tests.approvals.grant_helpers import grant_policy, request_grant

    settings.GRANT_RENEWAL_NOTICE_SECONDS = 3600
    grant_policy(tenant)
    proposal = request_grant(agent)
    Worker().tick()  # the request is posted to finance's channel
    ((_, ts),) = slack.messages
    factories.vote(proposal, reviewer_a)
    factories.vote(proposal, reviewer_b)
    grant = proposal.grant

    for asked, people in ask_for_renewals(grant.expires_at - timedelta(minutes=30)):
        grant_renewals.tell(asked, people)

    replies = [p for p in slack.calls_to("chat.postMessage") if p.get("thread_ts")]
    assert [r["thread_ts"] for r in replies] == [ts]
    assert replies[0]["text"].startswith("Renewal asked: this standing grant expires at")
