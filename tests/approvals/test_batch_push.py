"""A batch parked in an A2A task (docs/agents/batches.md#over-a2a): the push webhook takes it in as
`POST /api/v1/batches` does, all or nothing, and each member's decision is its own continuation to the
task, naming the manifest. Bodies are the a2a-sdk's own types, serialized as its push sender does."""

import json
import uuid

import jwt
import pytest
from a2a.types import Message, Part, Role, StreamResponse, TaskState, TaskStatus, TaskStatusUpdateEvent
from google.protobuf.json_format import MessageToDict

from approvals.a2a.push import EXTENSION_URI
from approvals.canonical import manifest_digest
from approvals.models import Batch, Decision, OutboxMessage, Proposal
from approvals.services.batches import cast_batch_vote
from approvals.states import State
from audit.models import AuditEvent, Verb
from tests import factories
from tests.factories import approval_request, fresh_step_up, refund_action

pytestmark = pytest.mark.django_db

URL = "/a2a/push/refund-demo/"
TOKEN = {"HTTP_X_A2A_NOTIFICATION_TOKEN": "push-secret"}


@pytest.fixture
def batch_policy(tenant):
    return factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        thresholds=[{"group": "finance", "count": 1}],
        batch={"max_members": 25, "max_total": {"EUR": "1000.00"}},
    )


def members(count: int) -> list[dict]:
    return [
        approval_request(
            action=refund_action(order_id=str(1000 + i), amount="25.00"),
            request_id=f"refund-{1000 + i}",
            consequences={"reversible": True},
        )
        for i in range(count)
    ]


def parked_batch(member_list: list[dict], **overrides) -> dict:
    """The parked task's status update, its message's metadata holding the batch."""
    batch = {
        "batch_id": "outage-refunds",
        "summary": "Refunds after the outage",
        "manifest_digest": manifest_digest([m["action_digest"] for m in member_list]),
        "members": member_list,
        **overrides,
    }
    message = Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_AGENT,
        task_id="task-batch",
        context_id="ctx-batch",
        parts=[Part(text="waiting for approval")],
        metadata={EXTENSION_URI: {"batch": batch}},
    )
    status = TaskStatus(state=TaskState.TASK_STATE_AUTH_REQUIRED, message=message)
    update = TaskStatusUpdateEvent(task_id="task-batch", context_id="ctx-batch", status=status)
    return MessageToDict(StreamResponse(status_update=update))


def push(client, body):
    return client.post(URL, data=json.dumps(body), content_type="application/json", **TOKEN)


def test_a_parked_batch_becomes_a_batch_of_the_task_and_the_same_push_again_is_the_same(
    client, agent, batch_policy
):
    body = parked_batch(members(3))

    first, second = push(client, body), push(client, body)

    assert (first.status_code, second.status_code) == (201, 200)
    answer = first.json()
    assert answer["task_id"] == "task-batch" and answer["batch_id"] == "outage-refunds"
    assert [m["request_id"] for m in answer["members"]] == ["refund-1000", "refund-1001", "refund-1002"]
    assert second.json()["batch"] == answer["batch"]
    batch = Batch.objects.get()
    assert (batch.task_id, batch.context_id) == ("task-batch", "ctx-batch")
    assert set(Proposal.objects.values_list("task_id", "state")) == {("task-batch", State.AWAITING_REVIEW)}
    assert AuditEvent.objects.get(verb=Verb.BATCH_SUBMITTED).data["via"] == "push"


def test_each_members_decision_is_its_own_continuation_to_the_task_naming_the_manifest(
    client, agent, batch_policy, reviewer_a
):
    answer = push(client, parked_batch(members(3))).json()

    cast_batch_vote(
        answer["batch"],
        reviewer_a,
        verdict="approve",
        manifest_seen=answer["manifest_digest"],
        step_up=fresh_step_up(reviewer_a),
    )

    continuations = OutboxMessage.objects.filter(kind=OutboxMessage.Kind.CONTINUE).select_related("proposal")
    assert len(continuations) == 3
    for message in continuations:
        token = Decision.objects.get(jti=message.payload["jti"]).token  # what the SendMessage carries
        claims = jwt.decode(token, options={"verify_signature": False})
        assert claims["sub"] == "task-batch"
        assert claims["request_id"] == message.proposal.request_id
        assert claims["manifest"] == answer["manifest_digest"]


@pytest.mark.parametrize(
    ("change", "code", "field"),
    [
        ({"manifest_digest": "sha256:" + "0" * 64}, "manifest_mismatch", None),
        ({"task_id": "another-task"}, "invalid", "batch"),
        ({"members": []}, "invalid", "batch.members"),
    ],
)
def test_a_wrong_parked_batch_is_refused_and_nothing_is_stored(
    client, agent, batch_policy, change, code, field
):
    response = push(client, parked_batch(members(2), **change))

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == code
    if field is not None:
        assert error["field"] == field
    assert not Batch.objects.exists() and not Proposal.objects.exists()
    assert AuditEvent.objects.filter(verb=Verb.INTAKE_REFUSED).count() == 1


def test_revoking_the_batch_cancels_its_task(client, agent, batch_policy, reviewer_a):
    from approvals.services.batches import revoke_batch

    answer = push(client, parked_batch(members(2))).json()
    cast_batch_vote(
        answer["batch"],
        reviewer_a,
        verdict="approve",
        manifest_seen=answer["manifest_digest"],
        step_up=fresh_step_up(reviewer_a),
    )

    revoke_batch(answer["batch"], reviewer_a, reason="the outage refunds are on hold")

    cancels = OutboxMessage.objects.filter(kind=OutboxMessage.Kind.CANCEL)
    assert cancels.exists()
    assert {message.proposal.task_id for message in cancels.select_related("proposal")} == {"task-batch"}
    assert set(Proposal.objects.values_list("state", flat=True)) == {State.REVOKED}


def test_a_completed_task_settles_every_member_it_ran(client, agent, batch_policy, reviewer_a):
    from approvals.services.decisions import consume_decision
    from tests.approvals.test_push import status_push

    answer = push(client, parked_batch(members(2))).json()
    cast_batch_vote(
        answer["batch"],
        reviewer_a,
        verdict="approve",
        manifest_seen=answer["manifest_digest"],
        step_up=fresh_step_up(reviewer_a),
    )
    for decision in Decision.objects.all():
        consume_decision(agent, decision.jti, rev=decision.rev)

    done = push(
        client, status_push(TaskState.TASK_STATE_COMPLETED, task_id="task-batch", context_id="ctx-batch")
    )

    assert done.status_code == 200 and len(done.json()["changed"]) == 2
    assert set(Proposal.objects.values_list("state", flat=True)) == {State.SUCCEEDED}
