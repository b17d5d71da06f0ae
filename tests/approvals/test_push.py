"""The A2A push webhook, /a2a/push/<slug>/. Bodies are built with the a2a-sdk's own types and
serialized as its push sender does (MessageToDict of a StreamResponse), so the shapes are the real ones."""

import json
import uuid

import pytest
from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf.json_format import MessageToDict

from accounts.stepup import step_up_for
from approvals.a2a.push import EXTENSION_URI
from approvals.canonical import action_digest
from approvals.models import Decision, Proposal
from approvals.services.decisions import consume_decision, record_outcome
from approvals.services.halts import halt
from approvals.services.votes import cast_vote
from approvals.states import State
from audit.models import AuditEvent, Verb
from tests import factories
from tests.factories import approval_request, totp_code

pytestmark = pytest.mark.django_db

URL = "/a2a/push/refund-demo/"
TOKEN = {"HTTP_X_A2A_NOTIFICATION_TOKEN": "push-secret"}


def status_push(state, *, task_id="task-1", context_id="ctx-1", request=None, text="", as_task=False) -> dict:
    metadata = {EXTENSION_URI: {"request": request}} if request is not None else None
    message = Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_AGENT,
        task_id=task_id,
        context_id=context_id,
        parts=[Part(text=text or TaskState.Name(state))],
        metadata=metadata,
    )
    status = TaskStatus(state=state, message=message)
    if as_task:
        event = StreamResponse(task=Task(id=task_id, context_id=context_id, status=status))
    else:
        event = StreamResponse(
            status_update=TaskStatusUpdateEvent(task_id=task_id, context_id=context_id, status=status)
        )
    return MessageToDict(event)


def parked(request=None, **kwargs) -> dict:
    return status_push(TaskState.TASK_STATE_AUTH_REQUIRED, request=request or approval_request(), **kwargs)


def push(client, body, **headers):
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(URL, data=data, content_type="application/json", **{**TOKEN, **headers})


def error_of(response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "field"}, body
    return body["error"]


# --- intake ----------------------------------------------------------------------------------------


def test_a_parked_task_becomes_a_proposal(client, agent, refund_policy):
    request = approval_request()

    response = push(client, parked(request, task_id="task-9", context_id="ctx-9"))

    assert response.status_code == 201
    proposal = Proposal.objects.get()
    assert response.json()["proposal_id"] == str(proposal.id)
    assert (proposal.task_id, proposal.context_id, proposal.request_id) == (
        "task-9",
        "ctx-9",
        request["request_id"],
    )
    assert proposal.state == State.AWAITING_REVIEW
    assert AuditEvent.objects.get(verb=Verb.PROPOSAL_SUBMITTED).data["via"] == "push"


def test_a_task_snapshot_push_is_read_too(client, agent, refund_policy):
    response = push(client, parked(as_task=True))

    assert response.status_code == 201
    assert Proposal.objects.count() == 1


def test_the_same_push_twice_is_one_proposal(client, agent, refund_policy):
    body = parked()

    first, second = push(client, body), push(client, body)

    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json() == second.json()
    assert Proposal.objects.count() == 1


def test_push_and_rest_for_the_same_request_are_one_proposal(client, agent, refund_policy):
    request = approval_request()
    push(client, parked(request, task_id="task-5"))

    response = client.post(
        "/api/v1/proposals",
        data=json.dumps({"task_id": "task-5", "context_id": "ctx-1", "request": request}),
        content_type="application/json",
        HTTP_AUTHORIZATION="Bearer api-secret",
    )

    assert response.status_code == 200
    assert Proposal.objects.count() == 1


def test_whole_numbers_that_protobuf_turned_into_doubles_keep_their_digest(client, agent, refund_policy):
    # A Struct stores every number as a double: 3 arrives as 3.0. RFC 8785 writes both as 3. (Numbers
    # inside action.arguments are refused on both paths: see test_hostile_input.py.)
    action = {"tool": "inventory.adjust", "arguments": {"sku": "A-1", "quantity": "3"}, "attempt": 3}
    request = approval_request(action=action)
    assert request["action_digest"] == action_digest(action)

    response = push(client, parked(request))

    assert response.status_code == 201, response.json()


# --- authentication and limits ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"HTTP_X_A2A_NOTIFICATION_TOKEN": "wrong"},
        {"HTTP_X_A2A_NOTIFICATION_TOKEN": ""},
        {"HTTP_X_A2A_NOTIFICATION_TOKEN": "api-secret"},
    ],
)
def test_a_push_without_the_agents_push_token_is_refused_and_stores_nothing(
    client, agent, refund_policy, headers
):
    response = client.post(URL, data=json.dumps(parked()), content_type="application/json", **headers)

    assert response.status_code == 401
    assert error_of(response)["code"] == "unauthorized"
    assert Proposal.objects.count() == 0
    assert not AuditEvent.objects.filter(verb__in=[Verb.PROPOSAL_SUBMITTED, Verb.INTAKE_REFUSED]).exists()


def test_a_push_for_an_unknown_agent_gets_the_same_refusal(client, agent):
    response = client.post(
        "/a2a/push/nobody/", data=json.dumps(parked()), content_type="application/json", **TOKEN
    )

    assert response.status_code == 401
    assert error_of(response)["code"] == "unauthorized"


def test_another_agents_push_token_does_not_open_this_webhook(client, tenant, agent, refund_policy):
    factories.make_agent(tenant, slug="other-agent", push_token="other-push", api_token="other-api")

    response = push(client, parked(), HTTP_X_A2A_NOTIFICATION_TOKEN="other-push")

    assert response.status_code == 401


def test_the_webhook_takes_only_post(client, agent):
    assert client.get(URL, **TOKEN).status_code == 405
    assert client.put(URL, data="{}", content_type="application/json", **TOKEN).status_code == 405


def test_an_oversized_push_is_refused(client, agent, refund_policy, settings):
    settings.PROPOSAL_MAX_BYTES = 1000
    request = approval_request(consequences={"padding": "x" * 3000})

    response = push(client, parked(request))

    assert response.status_code == 413
    assert Proposal.objects.count() == 0


# --- malformed bodies ------------------------------------------------------------------------------


def test_a_push_that_is_not_json_is_a_400(client, agent):
    response = push(client, b"\xff{")

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_json"


@pytest.mark.parametrize(
    "body", [[1, 2], {"statusUpdate": {"status": {"state": "TASK_STATE_BOGUS"}}}, {"statusUpdate": "parked"}]
)
def test_a_push_that_is_not_a_stream_response_is_a_400(client, agent, body):
    response = push(client, body)

    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_shape"


def test_a_malformed_approval_request_is_a_400_naming_the_field(client, agent, refund_policy):
    request = approval_request()
    del request["summary"]

    response = push(client, parked(request))

    assert response.status_code == 400
    error = error_of(response)
    assert (error["code"], error["field"]) == ("invalid", "request.summary")
    assert Proposal.objects.count() == 0


def test_a_request_whose_digest_does_not_match_is_refused_and_recorded(client, agent, refund_policy):
    request = approval_request()
    request["action"]["arguments"]["amount"] = "9999.00"

    response = push(client, parked(request))

    assert response.status_code == 400
    assert error_of(response)["code"] == "digest_mismatch"
    assert AuditEvent.objects.get(verb=Verb.INTAKE_REFUSED).data["via"] == "push"
    assert Proposal.objects.count() == 0


# --- events that are neither -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        status_push(TaskState.TASK_STATE_WORKING),
        status_push(TaskState.TASK_STATE_SUBMITTED, as_task=True),
        status_push(TaskState.TASK_STATE_AUTH_REQUIRED),  # waiting for some other credential, not for us
        MessageToDict(
            StreamResponse(
                artifact_update=TaskArtifactUpdateEvent(
                    task_id="task-1", artifact=Artifact(artifact_id="a", parts=[Part(text="receipt")])
                )
            )
        ),
    ],
)
def test_other_task_events_are_acknowledged_and_ignored(client, agent, refund_policy, body):
    response = push(client, body)

    assert response.status_code == 200
    assert "ignored" in response.json()
    assert Proposal.objects.count() == 0


# --- outcomes --------------------------------------------------------------------------------------


@pytest.fixture
def executing(agent, refund_policy, requester, reviewer_a):
    proposal = factories.submit(agent, task_id="task-x")
    cast_vote(
        proposal.id,
        reviewer_a,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
    )
    decision = Decision.objects.get(proposal=proposal)
    consume_decision(agent, decision.jti, rev=decision.rev)
    return Proposal.objects.get(pk=proposal.pk)


def test_a_completed_task_settles_its_execution_as_succeeded(client, executing):
    response = push(
        client, status_push(TaskState.TASK_STATE_COMPLETED, task_id="task-x", text="Refund done: tx-1")
    )

    assert response.status_code == 200
    assert response.json()["changed"] == [str(executing.id)]
    executing.refresh_from_db()
    assert executing.state == State.SUCCEEDED
    assert executing.outcome_detail == "Refund done: tx-1"
    assert AuditEvent.objects.filter(verb=Verb.OUTCOME_RECORDED, data__via="task_state").count() == 1


@pytest.mark.parametrize("state", [TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_REJECTED])
def test_a_task_that_failed_or_was_rejected_settles_its_execution_as_failed(client, executing, state):
    push(client, status_push(state, task_id="task-x"))

    executing.refresh_from_db()
    assert executing.state == State.FAILED


def test_a_task_cancelled_while_executing_leaves_the_outcome_unknown(client, executing):
    # A cancel (a halt) can land after the write started: cancelled is no proof that nothing happened.
    push(client, status_push(TaskState.TASK_STATE_CANCELED, task_id="task-x"))

    executing.refresh_from_db()
    assert executing.state == State.UNKNOWN


def test_a_failed_task_does_not_turn_an_unknown_outcome_into_failed(client, executing, agent):
    record_outcome(agent, executing.decision.jti, status="unknown", detail="payments answer lost")

    push(client, status_push(TaskState.TASK_STATE_FAILED, task_id="task-x", text="Refund outcome unknown"))
    executing.refresh_from_db()
    assert executing.state == State.UNKNOWN

    push(client, status_push(TaskState.TASK_STATE_COMPLETED, task_id="task-x"))
    executing.refresh_from_db()
    assert executing.state == State.SUCCEEDED


def test_the_same_outcome_pushed_twice_is_recorded_once(client, executing):
    body = status_push(TaskState.TASK_STATE_COMPLETED, task_id="task-x")

    push(client, body)
    second = push(client, body)

    assert second.status_code == 200
    assert second.json()["changed"] == []
    assert AuditEvent.objects.filter(verb=Verb.OUTCOME_RECORDED).count() == 1


def test_an_outcome_is_still_recorded_during_a_halt(client, executing, admin_user, agent):
    halt(scope="agent", agent=agent, actor=admin_user, reason="incident")

    push(client, status_push(TaskState.TASK_STATE_COMPLETED, task_id="task-x"))

    executing.refresh_from_db()
    assert executing.state == State.SUCCEEDED


def test_a_task_that_ends_while_waiting_for_review_closes_its_proposal(client, agent, refund_policy):
    proposal = factories.submit(agent, task_id="task-w")

    push(client, status_push(TaskState.TASK_STATE_CANCELED, task_id="task-w"))

    proposal.refresh_from_db()
    assert proposal.state == State.CANCELLED


def test_a_finished_task_never_settles_an_approval_nobody_consumed(
    client, agent, refund_policy, requester, reviewer_a
):
    proposal = factories.submit(agent, task_id="task-a")
    cast_vote(
        proposal.id,
        reviewer_a,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
    )

    push(client, status_push(TaskState.TASK_STATE_COMPLETED, task_id="task-a"))

    proposal.refresh_from_db()
    assert proposal.state == State.APPROVED


def test_a_terminal_push_for_another_agents_task_changes_nothing(client, tenant, executing):
    factories.make_agent(tenant, slug="other-agent", push_token="other-push", api_token="other-api")

    client.post(
        "/a2a/push/other-agent/",
        data=json.dumps(status_push(TaskState.TASK_STATE_FAILED, task_id="task-x")),
        content_type="application/json",
        HTTP_X_A2A_NOTIFICATION_TOKEN="other-push",
    )

    executing.refresh_from_db()
    assert executing.state == State.EXECUTING


# --- halt ------------------------------------------------------------------------------------------


def test_a_request_pushed_during_a_halt_is_a_503(client, agent, refund_policy, admin_user):
    halt(scope="global", actor=admin_user, reason="audit in progress")

    response = push(client, parked())

    assert response.status_code == 503
    error = error_of(response)
    assert error["code"] == "halted"
    assert "audit in progress" in error["message"]
    assert Proposal.objects.count() == 0
