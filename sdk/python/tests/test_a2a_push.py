"""ReviewerPushSender through a2a-sdk's own send_notification (the entry point a2a-sdk's task consumer
calls), with a2a-sdk's in-memory push config store and real POSTs to two fake Reviewers on loopback:
one is the Reviewer the sender is told about, the other stands for any other subscriber's webhook."""

import pytest

pytest.importorskip("a2a")

import httpx  # noqa: E402
from a2a.server.context import ServerCallContext  # noqa: E402
from a2a.server.tasks import InMemoryPushNotificationConfigStore  # noqa: E402
from a2a.types import (  # noqa: E402
    Artifact,
    Part,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

from reviewer_gate.a2a import ReviewerPushSender  # noqa: E402
from reviewer_gate.testing import FakeReviewer  # noqa: E402

TASK, CONTEXT = "task-1", "context-1"


def _status(state: int) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(task_id=TASK, context_id=CONTEXT, status=TaskStatus(state=state))


def _pushed_states(server: FakeReviewer) -> list[str]:
    states = []
    for push in server.pushes:
        body = push["body"]
        if "artifactUpdate" in body:
            states.append("artifact")
        else:
            states.append((body.get("task") or body.get("statusUpdate"))["status"]["state"])
    return states


@pytest.fixture
def other(key):
    server = FakeReviewer([key]).start()
    yield server
    server.stop()


async def test_reviewers_webhook_gets_only_what_reviewer_reads_and_others_get_everything(reviewer, other):
    store = InMemoryPushNotificationConfigStore()
    for server, config_id in ((reviewer, "reviewer"), (other, "other")):
        config = TaskPushNotificationConfig(
            id=config_id, url=f"{server.url}/a2a/push/demo/", token="push-token"
        )
        await store.set_info(TASK, config, ServerCallContext())
    events = [
        Task(id=TASK, context_id=CONTEXT, status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)),
        _status(TaskState.TASK_STATE_AUTH_REQUIRED),
        _status(TaskState.TASK_STATE_WORKING),
        TaskArtifactUpdateEvent(
            task_id=TASK, context_id=CONTEXT, artifact=Artifact(artifact_id="a", parts=[Part(text="done")])
        ),
        _status(TaskState.TASK_STATE_COMPLETED),
    ]
    async with httpx.AsyncClient(timeout=5) as http:
        sender = ReviewerPushSender(http, store, reviewer_urls=[reviewer.url + "/"])
        for event in events:
            await sender.send_notification(TASK, event)

    assert _pushed_states(reviewer) == ["TASK_STATE_AUTH_REQUIRED", "TASK_STATE_COMPLETED"]
    assert {push["token"] for push in reviewer.pushes} == {"push-token"}
    assert _pushed_states(other) == [
        "TASK_STATE_SUBMITTED",
        "TASK_STATE_AUTH_REQUIRED",
        "TASK_STATE_WORKING",
        "artifact",
        "TASK_STATE_COMPLETED",
    ]


@pytest.mark.parametrize(
    "state",
    [
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    ],
)
async def test_every_final_state_reaches_reviewer(reviewer, state):
    store = InMemoryPushNotificationConfigStore()
    config = TaskPushNotificationConfig(id="reviewer", url=f"{reviewer.url}/a2a/push/demo/")
    await store.set_info(TASK, config, ServerCallContext())
    async with httpx.AsyncClient(timeout=5) as http:
        await ReviewerPushSender(http, store, reviewer_urls=[reviewer.url]).send_notification(
            TASK, _status(state)
        )

    assert _pushed_states(reviewer) == [TaskState.Name(state)]


def test_a_sender_needs_reviewers_url():
    with pytest.raises(ValueError, match="reviewer_urls"):
        ReviewerPushSender(httpx.AsyncClient(), InMemoryPushNotificationConfigStore(), reviewer_urls=[])
