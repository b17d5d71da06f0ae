"""`Prefer: decision-in-answer` on POST /api/v1/proposals (docs/agents/rest-api.md, "Submit a request"):
an A2A agent that acts on a decision policy makes at intake from the intake answer asks Reviewer to
hold the task's continuation. The continuation is then due only ANSWERED_CONTINUATION_DELAY_SECONDS
later (nobody, neither the direct send nor a worker, can claim it before), and when it comes due it
is sent only if the agent has not started on the decision; otherwise it is recorded as delivered
without a SendMessage. The agent it would go to is a real A2A server on loopback (fake_agent)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.models import Decision, OutboxMessage, Proposal
from approvals.services.decisions import consume_decision
from approvals.services.outbox import claim_outbox_message
from approvals.worker.delivery import deliver_claimed
from audit.models import AuditEvent, Verb
from tests import factories

pytestmark = pytest.mark.django_db

AUTH = {"HTTP_AUTHORIZATION": "Bearer api-secret"}


@pytest.fixture
def a2a_agent(tenant, fake_agent):
    return factories.make_agent(tenant, card_url=fake_agent.card_url)


@pytest.fixture
def allow_refunds(tenant):
    factories.make_policy(tenant, "small-refunds", tool_pattern="payments.refund", outcome="allow")


def submit(client, fake_agent, **headers):
    task_id, context_id = fake_agent.open_task()
    body = {"task_id": task_id, "context_id": context_id, "request": factories.approval_request()}
    response = client.post("/api/v1/proposals", body, content_type="application/json", **AUTH, **headers)
    assert response.status_code == 201, response.content
    return response, Proposal.objects.get(task_id=task_id)


def continuation(proposal) -> OutboxMessage:
    return OutboxMessage.objects.get(proposal=proposal, kind=OutboxMessage.Kind.CONTINUE)


def test_an_allowed_request_that_prefers_the_answer_holds_its_continuation(
    client, settings, fake_agent, a2a_agent, allow_refunds
):
    settings.ANSWERED_CONTINUATION_DELAY_SECONDS = 10
    before = timezone.now()

    response, proposal = submit(client, fake_agent, HTTP_PREFER="decision-in-answer")

    assert response["Preference-Applied"] == "decision-in-answer"
    assert response.json()["token"] == Decision.objects.get(proposal=proposal).token
    message = continuation(proposal)
    assert message.next_attempt_at >= before + timedelta(seconds=10)
    assert claim_outbox_message(message.id) is None  # not due: neither the direct send nor a worker
    assert claim_outbox_message(message.id, now=message.next_attempt_at) is not None  # due then


def test_without_the_preference_the_continuation_is_due_at_once(client, fake_agent, a2a_agent, allow_refunds):
    response, proposal = submit(client, fake_agent)

    assert "Preference-Applied" not in response
    assert continuation(proposal).next_attempt_at <= timezone.now()


@pytest.mark.parametrize(
    "prefer",
    ["respond-async, decision-in-answer", "DECISION-IN-ANSWER; reason=sdk", "wait=5,decision-in-answer"],
)
def test_the_preference_is_read_among_others_as_rfc_7240_writes_them(
    client, fake_agent, a2a_agent, allow_refunds, prefer
):
    response, _ = submit(client, fake_agent, HTTP_PREFER=prefer)

    assert response["Preference-Applied"] == "decision-in-answer"


def test_a_preference_with_a_longer_name_is_not_this_one(client, fake_agent, a2a_agent, allow_refunds):
    response, proposal = submit(client, fake_agent, HTTP_PREFER="decision-in-answer-later")

    assert "Preference-Applied" not in response
    assert continuation(proposal).next_attempt_at <= timezone.now()


def test_a_request_left_to_people_applies_no_preference(client, fake_agent, a2a_agent, refund_policy):
    response, proposal = submit(client, fake_agent, HTTP_PREFER="decision-in-answer")

    assert response.json()["state"] == "awaiting_review"
    assert "Preference-Applied" not in response
    assert not OutboxMessage.objects.filter(proposal=proposal).exists()


def test_a_held_continuation_of_a_decision_the_agent_consumed_is_recorded_not_sent(
    client, fake_agent, a2a_agent, allow_refunds
):
    _, proposal = submit(client, fake_agent, HTTP_PREFER="decision-in-answer")
    decision = Decision.objects.get(proposal=proposal)
    consume_decision(a2a_agent, decision.jti, rev=decision.rev)  # acted on from the answer
    message = claim_outbox_message(continuation(proposal).id, now=continuation(proposal).next_attempt_at)
    assert message is not None

    assert deliver_claimed(message) == "delivered"

    assert continuation(proposal).status == OutboxMessage.Status.DELIVERED
    assert fake_agent.decisions_received() == []
    (event,) = AuditEvent.objects.filter(verb=Verb.OUTBOX_DELIVERED, data__outbox_id=message.id)
    assert event.data["note"] == "not sent: the agent had the decision (the proposal is executing)"


def test_a_held_continuation_the_agent_never_acted_on_is_sent_when_due(
    client, fake_agent, a2a_agent, allow_refunds
):
    """The answer was lost on its way, or came after the agent stopped waiting and parked the task."""
    _, proposal = submit(client, fake_agent, HTTP_PREFER="decision-in-answer")
    message = claim_outbox_message(continuation(proposal).id, now=continuation(proposal).next_attempt_at)
    assert message is not None

    assert deliver_claimed(message) == "delivered"

    (received,) = fake_agent.decisions_received()
    assert received.message_id == f"decision-{Decision.objects.get(proposal=proposal).jti}"


def test_a_pull_agent_is_told_the_preference_applied_and_gets_no_continuation(client, tenant, allow_refunds):
    """docs/agents/rest-api.md: `Preference-Applied` says the decision is in this answer and no
    continuation follows it. For a pull agent that is always so (Reviewer never calls it), and the header
    says it the same way, so one client reads both kinds of agent alike."""
    factories.make_agent(tenant, "puller", card_url="", api_token="pull-secret")
    body = {"task_id": "task-pull-1", "context_id": "", "request": factories.approval_request()}
    response = client.post(
        "/api/v1/proposals",
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION="Bearer pull-secret",
        HTTP_PREFER="decision-in-answer",
    )
    assert response.status_code == 201, response.content
    assert response["Preference-Applied"] == "decision-in-answer" and response.json()["token"]
    assert not OutboxMessage.objects.filter(kind=OutboxMessage.Kind.CONTINUE).exists()
