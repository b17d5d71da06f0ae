"""Decisions in Teams: a channel with Reviewer's bot gets one card per request, updated in place, with
Approve and Reject where the policy allows chat decisions; the bot answers them with the same rules as
Slack (the person linked once, a fresh code in the form, the page's vote with its separation of duties
and quorum). Teams cannot be reached from here: the Bot Framework's login service and Bot Connector are
the loopback stand-in tests/notify/teams_bot_standin.py, which signs activities as the connector does;
Reviewer checks them against the stand-in's published OpenID metadata and keys."""

import json

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from accounts.stepup import verify_code
from approvals.models import Proposal, Vote
from approvals.models.notifications import TeamsIdentity, TeamsPost
from approvals.worker.loop import Worker
from audit.models import AuditEvent, Verb
from tests import factories
from tests.factories import totp_code, trail_name

pytestmark = pytest.mark.django_db

ALICE, BOB, REQUESTER = "aad-alice", "aad-bob", "aad-requester"


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
    kwargs.setdefault(
        "consequences", {"effect": "Money leaves the merchant account", "reversible": True, "amount": "40.00"}
    )
    return factories.submit(agent, **kwargs)


def link(channel, user, aad: str) -> TeamsIdentity:
    from django.utils import timezone

    return TeamsIdentity.objects.create(
        bot=channel.bot, aad_object_id=aad, user=user, linked_at=timezone.now()
    )


def send(client, standin, activity: dict, authorization: str | None = None):
    """POST an activity to the bot's messaging endpoint as Teams does, signed by the connector."""
    return client.post(
        "/teams/messages",
        data=json.dumps(activity),
        content_type="application/json",
        headers={"Authorization": standin.signed(activity) if authorization is None else authorization},
    )


def press(client, standin, aad: str, verb: str, data: dict) -> dict:
    response = send(client, standin, standin.invoke(aad, verb, data))
    assert response.status_code == 200
    answer = response.json()
    assert answer["statusCode"] == 200 and answer["type"] == "application/vnd.microsoft.card.adaptive"
    return answer["value"]


def executes(card: dict) -> list[dict]:
    return [a for a in card["actions"] if a["type"] == "Action.Execute"]


def text(card: dict) -> str:
    return json.dumps(card, ensure_ascii=False)


def test_a_bot_channel_gets_one_card_that_follows_the_request_in_place(
    agent, chat_policy, bot_channel, bot_framework, requester, reviewer_a, reviewer_b
):
    proposal = submit(agent)
    Worker().tick()
    Worker().tick()  # nothing changed: nothing sent
    (posted,) = bot_framework.posted
    assert posted["conversation"] == bot_channel.conversation_id and bot_framework.updated == []
    card = posted["card"]
    assert "Refund EUR 40.00 · order:1182" in text(card) and "0 of 2 approvals" in text(card)
    assert [(a["title"], a["verb"], a["data"]["verdict"]) for a in executes(card)] == [
        ("Approve", "reviewer.open", "approve"),
        ("Reject", "reviewer.open", "reject"),
    ]
    assert proposal.action_digest not in text(card)
    factories.vote(proposal, reviewer_a)
    Worker().tick()
    (update,) = bot_framework.updated
    assert update["activity_id"] == posted["activity_id"] and "1 of 2 approvals" in text(update["card"])
    factories.vote(proposal, reviewer_b)
    Worker().tick()
    Worker().tick()
    assert len(bot_framework.posted) == 1 and len(bot_framework.updated) == 2
    closed = bot_framework.updated[-1]["card"]
    assert "Request closed" in text(closed) and "Approved by" in text(closed) and executes(closed) == []
    assert TeamsPost.objects.get().final


def test_an_unlinked_teams_user_links_once_then_approves_with_a_fresh_code(
    client, agent, chat_policy, bot_channel, bot_framework, requester, reviewer_a, reviewer_b
):
    proposal = submit(agent)
    offer = press(
        client, bot_framework, ALICE, "reviewer.open", {"proposal": str(proposal.id), "verdict": "approve"}
    )
    (open_link,) = offer["actions"]
    assert offer["body"][0]["text"] == "Link your account" and "/teams/link/" in open_link["url"]
    path = open_link["url"].split("://", 1)[1].split("/", 1)[1]
    confirmed = factories.verified_client(reviewer_a).post("/" + path)
    assert confirmed.status_code == 200 and TeamsIdentity.objects.get(aad_object_id=ALICE).user == reviewer_a
    assert AuditEvent.objects.filter(verb=Verb.TEAMS_LINKED, actor=trail_name("reviewer_a")).exists()

    form = press(
        client, bot_framework, ALICE, "reviewer.open", {"proposal": str(proposal.id), "verdict": "approve"}
    )
    assert {i["id"] for i in form["body"] if i["type"] == "Input.Text"} == {"reason", "code"}
    (submit_button, _cancel) = form["actions"]
    answer = press(
        client,
        bot_framework,
        ALICE,
        submit_button["verb"],
        {**submit_button["data"], "reason": "ticket checked", "code": totp_code(reviewer_a)},
    )
    assert "1 of 2 approvals" in text(answer)
    vote = Vote.objects.get(proposal=proposal)
    assert (vote.voter, vote.verdict, vote.auth_method, vote.reason) == (
        reviewer_a,
        "approve",
        "totp",
        "ticket checked",
    )
    assert vote.page_hash.startswith("teams:")
    cast = AuditEvent.objects.get(verb=Verb.VOTE_CAST, subject=f"proposal:{proposal.id}")
    assert cast.data["auth"]["method"] == "totp"
    # The same person cannot count twice; a second approver on the page completes the quorum.
    again = press(
        client,
        bot_framework,
        ALICE,
        submit_button["verb"],
        {**submit_button["data"], "code": totp_code(reviewer_a)},
    )
    assert "Attention" in text(again) and Vote.objects.filter(proposal=proposal).count() == 1
    factories.vote(proposal, reviewer_b)
    assert Proposal.objects.get(pk=proposal.pk).state == "approved"


def test_a_teams_rejection_without_a_reason_keeps_its_code_for_the_corrected_form(
    client, agent, chat_policy, bot_channel, bot_framework, requester, reviewer_a
):
    proposal = submit(agent)
    link(bot_channel, reviewer_a, ALICE)
    form = press(
        client, bot_framework, ALICE, "reviewer.open", {"proposal": str(proposal.id), "verdict": "reject"}
    )
    data = form["actions"][0]["data"]
    code = totp_code(reviewer_a)
    refused = press(client, bot_framework, ALICE, "reviewer.decide", {**data, "reason": "  ", "code": code})
    assert "a rejection needs a reason" in text(refused)
    assert not AuditEvent.objects.filter(verb=Verb.STEP_UP_FAILED).exists()
    decided = press(
        client, bot_framework, ALICE, "reviewer.decide", {**data, "reason": "duplicate", "code": code}
    )
    assert "Request closed" in text(decided) and "Rejected by" in text(decided)
    assert Proposal.objects.get(pk=proposal.pk).state == "rejected"


def test_the_requester_cannot_approve_their_own_request_from_teams(
    client, agent, chat_policy, bot_channel, bot_framework, requester
):
    proposal = submit(agent)
    link(bot_channel, requester, REQUESTER)
    form = press(
        client,
        bot_framework,
        REQUESTER,
        "reviewer.open",
        {"proposal": str(proposal.id), "verdict": "approve"},
    )
    answer = press(
        client,
        bot_framework,
        REQUESTER,
        "reviewer.decide",
        {**form["actions"][0]["data"], "code": totp_code(requester)},
    )
    assert "someone else must decide it" in text(answer)
    assert not Vote.objects.filter(proposal=proposal).exists()


def test_a_wrong_code_is_refused_in_the_form_and_recorded(
    client, agent, chat_policy, bot_channel, bot_framework, requester, reviewer_a
):
    proposal = submit(agent)
    link(bot_channel, reviewer_a, ALICE)
    data = {"proposal": str(proposal.id), "verdict": "approve", "digest": proposal.action_digest}
    answer = press(client, bot_framework, ALICE, "reviewer.decide", {**data, "code": "000000"})
    assert "not valid" in text(answer) and not Vote.objects.exists()
    assert AuditEvent.objects.filter(verb=Verb.STEP_UP_FAILED, subject=f"proposal:{proposal.id}").exists()


def test_chat_decisions_are_refused_where_the_policy_does_not_allow_them_and_the_code_is_kept(
    client, tenant, agent, bot_channel, bot_framework, requester, reviewer_a
):
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund")
    proposal = submit(agent)
    Worker().tick()
    (posted,) = bot_framework.posted
    assert executes(posted["card"]) == []  # no Approve / Reject on the card
    link(bot_channel, reviewer_a, ALICE)
    notice = press(
        client, bot_framework, ALICE, "reviewer.open", {"proposal": str(proposal.id), "verdict": "approve"}
    )
    assert "does not allow decisions from chat" in text(notice)
    code = totp_code(reviewer_a)
    forged = {
        "proposal": str(proposal.id),
        "verdict": "approve",
        "digest": proposal.action_digest,
        "code": code,
    }
    assert "does not allow decisions from chat" in text(
        press(client, bot_framework, ALICE, "reviewer.decide", forged)
    )
    assert not Vote.objects.exists() and verify_code(reviewer_a, code) == "totp"
    refused = AuditEvent.objects.filter(verb=Verb.TEAMS_REQUEST_REFUSED, data__code="chat_decisions_off")
    assert refused.count() == 2


def test_activities_not_signed_by_the_connector_for_this_bot_are_refused(
    client, agent, chat_policy, bot_channel, bot_framework, requester, reviewer_a
):
    proposal = submit(agent)
    link(bot_channel, reviewer_a, ALICE)
    activity = bot_framework.invoke(
        ALICE, "reviewer.open", {"proposal": str(proposal.id), "verdict": "approve"}
    )
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    refusals = {
        "no_token": "",
        "unknown_bot": bot_framework.signed(activity, aud="another-app"),
        "bad_signature": bot_framework.signed(activity, key=stranger),
        "expired": bot_framework.signed(activity, exp=1_000_000, nbf=999_000),
        "issuer": bot_framework.signed(activity, iss="https://sts.windows.net/someone/"),
        "service_url_mismatch": bot_framework.signed(activity, serviceUrl="https://evil.example/"),
        "unknown_kid": bot_framework.signed(activity, kid="not-published"),
    }
    for why, authorization in refusals.items():
        response = send(client, bot_framework, activity, authorization)
        assert response.status_code == 401, why
    codes = list(
        AuditEvent.objects.filter(verb=Verb.TEAMS_REQUEST_REFUSED).values_list("data__code", flat=True)
    )
    assert sorted(codes) == sorted(
        [
            "no_token",
            "unknown_bot",
            "bad_signature",
            "bad_signature",
            "bad_signature",
            "service_url_mismatch",
            "bad_signature",
        ]
    )
    assert send(client, bot_framework, activity).status_code == 200  # the genuine one
    wrong_channel = {**activity, "channelId": "webchat"}  # the key is endorsed for msteams only
    assert send(client, bot_framework, wrong_channel).status_code == 401


def test_a_teams_webhook_or_connector_on_plain_http_is_refused_unless_allowed(
    settings, agent, chat_policy, bot_channel, bot_framework, requester
):
    settings.NOTIFY_ALLOW_HTTP = False
    submit(agent)
    Worker().tick()
    assert bot_framework.posted == []
    assert TeamsPost.objects.get().attempts == 1  # refused before any connection, retried later


def test_a_malformed_or_deeply_nested_body_is_refused_before_anything_is_read(
    client, bot_channel, bot_framework
):
    for body in (b"not json", b"[1]", b"[" * 30_000 + b"]" * 30_000):
        response = client.post("/teams/messages", data=body, content_type="application/json")
        assert response.status_code == 400
    assert AuditEvent.objects.filter(verb=Verb.TEAMS_REQUEST_REFUSED, data__code="malformed").count() == 3
