"""`Prefer: consume` on POST /api/v1/proposals (docs/agents/rest-api.md, "Submit a request"): an agent
asks for an approval policy makes at intake to be consumed for it in the same request, so an allowed
call is two round trips (submit, outcome). The answer's state is then `executing`; the consume endpoint
answers for its decision as for any consumed one; a replay never hands out a second usable decision;
a request left to people, or denied, is not touched by the preference."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.models import Decision, OutboxMessage, Proposal
from approvals.schemas import ProposalSubmission
from approvals.services.intake import submit_proposal
from approvals.states import State
from audit.models import AuditEvent, Verb
from tests import factories

pytestmark = pytest.mark.django_db

AUTH = {"HTTP_AUTHORIZATION": "Bearer api-secret"}


@pytest.fixture
def allow_refunds(tenant):
    factories.make_policy(tenant, "small-refunds", tool_pattern="payments.refund", outcome="allow")


def post(client, body, **headers):
    return client.post("/api/v1/proposals", body, content_type="application/json", **AUTH, **headers)


def new_body(task_id="task-1", **request_fields):
    return {"task_id": task_id, "context_id": "", "request": factories.approval_request(**request_fields)}


def consume(client, decision):
    return client.post(
        f"/api/v1/decisions/{decision.jti}/consume",
        {"rev": decision.rev},
        content_type="application/json",
        **AUTH,
    )


def test_an_allowed_request_that_asks_is_answered_consumed(client, agent, allow_refunds):
    response = post(client, new_body(), HTTP_PREFER="consume")

    assert response.status_code == 201, response.content
    assert response["Preference-Applied"] == "consume"
    proposal = Proposal.objects.get(task_id="task-1")
    decision = Decision.objects.get(proposal=proposal)
    assert response.json()["state"] == "executing" == proposal.state
    assert response.json()["token"] == decision.token
    assert decision.consumed_at is not None and proposal.executing_since is not None
    assert proposal.rev == decision.rev + 1  # signed at allowed, then moved on as the consume moves it


def test_the_trail_says_it_was_consumed_at_intake(client, agent, allow_refunds):
    post(client, new_body(), HTTP_PREFER="consume")
    proposal = Proposal.objects.get(task_id="task-1")
    decision = Decision.objects.get(proposal=proposal)

    # In the trail's order (the model's: by seal, then the unsealed in insertion order; on PostgreSQL
    # the sequencer seals them later, so here none has a `seq` yet).
    verbs = list(AuditEvent.objects.filter(subject=f"proposal:{proposal.id}").values_list("verb", flat=True))
    assert verbs[-3:] == [Verb.DECISION_SIGNED, Verb.PROPOSAL_TRANSITIONED, Verb.DECISION_CONSUMED]
    moved = AuditEvent.objects.filter(subject=f"proposal:{proposal.id}", verb=Verb.PROPOSAL_TRANSITIONED)
    assert [(e.data["from"], e.data["to"]) for e in moved] == [
        ("proposed", "allowed"),
        ("allowed", "executing"),
    ]
    (consumed,) = AuditEvent.objects.filter(verb=Verb.DECISION_CONSUMED)
    assert consumed.data == {"jti": str(decision.jti), "rev": decision.rev, "via": "intake"}
    assert consumed.actor == f"agent:{agent.slug}"


def test_the_consume_endpoint_then_answers_consumed(client, agent, allow_refunds):
    post(client, new_body(), HTTP_PREFER="consume")
    decision = Decision.objects.get(proposal__task_id="task-1")

    response = consume(client, decision)

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "consumed"


def test_the_outcome_is_reported_as_after_a_consume(client, agent, allow_refunds):
    post(client, new_body(), HTTP_PREFER="consume")
    decision = Decision.objects.get(proposal__task_id="task-1")

    response = client.post(
        f"/api/v1/decisions/{decision.jti}/outcome",
        {"status": "succeeded", "transaction_id": "tx-1"},
        content_type="application/json",
        **AUTH,
    )

    assert response.status_code == 200 and response.json() == {"state": "succeeded"}


def test_a_replay_returns_the_same_decision_spent_and_says_nothing_was_applied(client, agent, allow_refunds):
    body = new_body()
    first = post(client, body, HTTP_PREFER="consume")

    again = post(client, body, HTTP_PREFER="consume")

    assert again.status_code == 200
    assert again.json()["token"] == first.json()["token"]
    assert again.json()["state"] == "executing"
    assert "Preference-Applied" not in again  # the first answer released the one execution, not this one
    assert AuditEvent.objects.filter(verb=Verb.DECISION_CONSUMED).count() == 1


def test_a_replay_that_asks_does_not_consume_a_request_made_without_asking(client, agent, allow_refunds):
    body = new_body()
    post(client, body)

    again = post(client, body, HTTP_PREFER="consume")

    assert again.status_code == 200 and again.json()["state"] == "allowed"
    assert "Preference-Applied" not in again
    decision = Decision.objects.get(proposal__task_id="task-1")
    assert decision.consumed_at is None
    assert consume(client, decision).status_code == 200  # the agent consumes it as before


def test_without_the_preference_nothing_changes(client, agent, allow_refunds):
    response = post(client, new_body(), HTTP_PREFER="decision-in-answer")

    assert response.json()["state"] == "allowed"
    assert response["Preference-Applied"] == "decision-in-answer"
    assert Decision.objects.get(proposal__task_id="task-1").consumed_at is None


def test_both_preferences_are_applied_together(client, agent, allow_refunds):
    response = post(client, new_body(), HTTP_PREFER="decision-in-answer, consume")

    assert response["Preference-Applied"] == "decision-in-answer, consume"


def test_a_request_left_to_people_is_not_consumed_when_they_approve(client, agent, refund_policy):
    response = post(client, new_body(), HTTP_PREFER="decision-in-answer, consume")

    assert response.status_code == 201 and response.json()["state"] == "awaiting_review"
    assert response.json()["token"] is None
    assert "Preference-Applied" not in response


def test_a_denied_request_is_not_consumed(client, tenant, agent):
    factories.make_policy(tenant, "no-refunds", tool_pattern="payments.refund", outcome="deny")

    response = post(client, new_body(), HTTP_PREFER="consume")

    assert response.json()["state"] == "denied" and response.json()["token"]
    assert "Preference-Applied" not in response
    assert not AuditEvent.objects.filter(verb=Verb.DECISION_CONSUMED).exists()


def test_an_a2a_agent_that_consumed_at_intake_gets_no_continuation(client, tenant, fake_agent, allow_refunds):
    factories.make_agent(tenant, card_url=fake_agent.card_url)
    task_id, context_id = fake_agent.open_task()
    body = {"task_id": task_id, "context_id": context_id, "request": factories.approval_request()}

    response = post(client, body, HTTP_PREFER="decision-in-answer, consume")

    assert response.json()["state"] == "executing"
    assert not OutboxMessage.objects.filter(kind=OutboxMessage.Kind.CONTINUE).exists()


def intake_queries(agent, task_id: str, *, consume: bool) -> int:
    submission = ProposalSubmission.model_validate(new_body(task_id, request_id=f"r-{task_id}"))
    with CaptureQueriesContext(connection) as captured:
        proposal, _ = submit_proposal(agent, submission, via="test", consume=consume)
    assert proposal.state == (State.EXECUTING if consume else State.ALLOWED)
    return len(captured)


def test_the_consume_at_intake_costs_no_query_of_its_own(tenant, allow_refunds):
    """Its writes (the proposal's transition, the decision marked consumed) are held with intake's, and
    its audit events go in intake's one INSERT."""
    puller = factories.make_agent(tenant, slug="puller", api_token="puller-secret", card_url="")
    intake_queries(puller, "warm-up", consume=False)  # the tenant's chain head is created once

    consumed = intake_queries(puller, "consumed", consume=True)
    plain = intake_queries(puller, "plain", consume=False)
    # SQLite runs held writes one by one, in the process (lib/storage/held_writes.py): the transition's
    # UPDATE is a statement there, and no round trip.
    assert consumed == plain + (0 if connection.vendor == "postgresql" else 1)
