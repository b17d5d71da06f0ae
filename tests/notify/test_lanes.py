"""The worker's lanes to people's tools (approvals/notify/lanes.py): a target that hangs holds one thread
of its lane, never the other targets; a failing target is left out for a back-off that doubles up to
its cap and ends at its first success; what it could not send is handed back, never dropped. And over
real sockets: a webhook endpoint that refuses connections leaves the other endpoint's webhooks
delivered and its own second webhook released unsent, its attempt not counted; a Slack workspace whose
API refuses connections is left out, its other posts due and unattempted."""

import socket
import threading

import pytest

from approvals.models import OutboxMessage
from approvals.models.notifications import SlackPost, SlackWorkspace
from approvals.notify.lanes import Lane, TargetBackoff
from approvals.services.webhooks import register_endpoint
from approvals.worker.loop import Worker
from tests import factories
from tests.notify.receivers import WebhookReceiver
from tests.notify.slack_requests import FINANCE_CHANNEL, TEAM
from tests.notify.slack_standin import BOT_TOKEN

DEADLINE = 30  # seconds a wait may take before the test fails (never a pass condition)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_failing_target_is_left_out_longer_at_each_failure_up_to_the_cap_and_back_at_its_first_success():
    clock = Clock()
    backoff = TargetBackoff(first=30, cap=100, clock=clock)

    assert [backoff.failed("hooks.example.test") for _ in range(4)] == [30, 60, 100, 100]
    assert backoff.skipped() == {"hooks.example.test"}
    clock.now += 100
    assert backoff.skipped() == set()  # its turn again: tried once more
    backoff.succeeded("hooks.example.test")
    assert backoff.failed("hooks.example.test") == 30  # a success started the count over


def test_a_failing_target_hands_back_the_rest_of_its_round_and_is_left_out_of_the_next(settings):
    settings.NOTIFY_TARGET_BACKOFF_SECONDS = 30
    lane: Lane[str] = Lane("test", threads=0)
    sent = []

    def send(item: str) -> bool:
        sent.append(item)
        return not item.startswith("down")

    left = lane.run({"down": ["down-1", "down-2", "down-3"], "up": ["up-1", "up-2"]}, send)

    assert sent == ["down-1", "up-1", "up-2"]
    assert left == ["down-2", "down-3"]  # the caller keeps them due
    assert lane.run({"down": ["down-2"], "up": ["up-3"]}, send) == ["down-2"]  # in back-off: not tried
    assert sent[-1] == "up-3"


def test_an_item_that_raises_is_its_own_problem_not_its_targets(settings):
    lane: Lane[int] = Lane("test", threads=0)
    sent = []

    def send(item: int) -> bool:
        if item == 1:
            raise ValueError("a bad row")
        sent.append(item)
        return True

    assert lane.run({"target": [1, 2]}, send) == []
    assert sent == [2] and lane.backoff.skipped() == set()


def test_a_target_that_hangs_holds_one_thread_and_the_other_targets_are_sent_meanwhile(settings):
    lane: Lane[str] = Lane("test", threads=2)
    hanging, release, others_sent = threading.Event(), threading.Event(), threading.Event()
    sent = []

    def send(item: str) -> bool:
        if item == "stuck":
            hanging.set()
            release.wait(DEADLINE)  # the target that accepts and never answers
            return False
        sent.append(item)
        if len(sent) == 2:
            others_sent.set()
        return True

    result: list[list[str]] = []
    runner = threading.Thread(
        target=lambda: result.append(lane.run({"a": ["stuck"], "b": ["b-1", "b-2"]}, send))
    )
    runner.start()
    try:
        assert hanging.wait(DEADLINE) and others_sent.wait(DEADLINE)
        assert not release.is_set() and sent == ["b-1", "b-2"]  # sent while the stuck call still waits
    finally:
        release.set()
        runner.join(DEADLINE)
        lane.close()
    assert result == [[]] and lane.backoff.skipped() == {"a"}


# --- the webhook job over real sockets -----------------------------------------------------------------


def refusing_url() -> str:
    """A loopback port nobody listens on: connecting is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/hooks"


@pytest.mark.django_db
def test_an_endpoint_that_refuses_holds_back_no_other_and_its_second_webhook_waits_unattempted(
    settings, tenant, agent, refund_policy, requester
):
    """The refusing port stands in for a tenant's endpoint whose server is down; the WebhookReceiver for
    one that works (it verifies the Standard Webhooks signature)."""
    settings.NOTIFY_ALLOW_HTTP = True
    settings.AGENT_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    receiver = WebhookReceiver()
    try:
        down = register_endpoint(tenant=tenant, url=refusing_url(), events=["proposal.awaiting_review"])
        up = register_endpoint(
            tenant=tenant, url=receiver.origin + "/hooks", events=["proposal.awaiting_review"]
        )
        receiver.secret = up.secret
        factories.submit(agent)
        factories.submit(agent)

        Worker().tick()

        assert len(receiver.verified) == 2
        to_down = OutboxMessage.objects.filter(payload__endpoint=down.pk).order_by("id")
        tried, waiting = list(to_down)
        assert tried.status == waiting.status == OutboxMessage.Status.PENDING
        assert tried.attempts == 1 and "could not reach" in tried.last_error
        assert waiting.attempts == 0 and waiting.last_error == ""  # handed back, not attempted
        assert waiting.next_attempt_at > tried.created_at  # due once the endpoint's back-off ends
    finally:
        receiver.stop()


@pytest.mark.django_db
def test_a_slack_api_that_refuses_connections_is_left_out_and_the_workspaces_other_posts_stay_due(
    settings, monkeypatch, tenant, agent, refund_policy, requester
):
    """The refusing port stands in for Slack's Web API when it cannot be reached; the worker calls it
    with its real client, slack_sdk's WebClient (SLACK_API_BASE_URL)."""
    settings.SLACK_API_BASE_URL = refusing_url() + "/api/"
    monkeypatch.setenv("SLACK_BOT_TOKEN_ACME", BOT_TOKEN)
    SlackWorkspace.objects.create(
        tenant=tenant,
        team_id=TEAM,
        bot_token_ref="env:SLACK_BOT_TOKEN_ACME",
        signing_secret_ref="env:SLACK_BOT_TOKEN_ACME",
        channels={"finance": FINANCE_CHANNEL},
    )
    factories.submit(agent)
    factories.submit(agent)
    worker = Worker()

    worker.tick()
    assert sorted(SlackPost.objects.values_list("attempts", flat=True)) == [0, 1]  # one call, refused

    worker.tick()  # the other post is due, its workspace in back-off: not called
    posts = list(SlackPost.objects.all())
    assert sorted(post.attempts for post in posts) == [0, 1]
    assert not any(post.final or post.ts for post in posts)  # both still to be posted
