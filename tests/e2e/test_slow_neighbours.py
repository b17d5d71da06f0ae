"""No slow neighbour stalls delivery: a real `run_worker` process, real sockets on loopback, and services
that accept connections and never answer (tests/notify/receivers.py `Hanging`: no mock stands in for
the slowness). The worker's read timeout is set far past any wait here, so what these tests see
happen while a call hangs happened beside it, not after it gave up: each job runs on a thread of its
own (approvals/worker/jobs.py) and each kind of call in a lane of its own (approvals/notify/lanes.py)."""

import pytest

from approvals.models import OutboxMessage
from approvals.models.notifications import SlackWorkspace
from approvals.services.webhooks import register_endpoint
from tests import factories
from tests.approvals.test_worker import approve
from tests.notify.receivers import Hanging, HangingServer, HangingWebhookReceiver, WebhookReceiver
from tests.notify.slack_requests import FINANCE_CHANNEL, SIGNING_SECRET, TEAM
from tests.notify.slack_standin import BOT_TOKEN
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DEADLINE = 30  # seconds a wait may take before the test fails (never a pass condition)
HANGING_CALLS_WAIT = "600"  # NOTIFY_READ_TIMEOUT_SECONDS of these workers: a hanging call outlasts the test


@pytest.fixture
def agent(tenant, fake_agent):
    return factories.make_agent(tenant, card_url=fake_agent.card_url)


def delivered(proposal) -> bool:
    return OutboxMessage.objects.filter(
        proposal=proposal, kind=OutboxMessage.Kind.CONTINUE, status=OutboxMessage.Status.DELIVERED
    ).exists()


def test_a_slack_api_that_never_answers_leaves_an_agents_continuation_delivered(
    workers, fake_agent, agent, tenant, refund_policy, reviewer_a
):
    """`slack_api` stands in for Slack's Web API (https://slack.com/api/) when it accepts connections and
    never answers; the worker calls it with its real client, slack_sdk's WebClient, through
    SLACK_API_BASE_URL. The agent is a real A2A server (tests/approvals/fake_agent.py)."""
    slack_api = HangingServer()
    try:
        SlackWorkspace.objects.create(
            tenant=tenant,
            team_id=TEAM,
            bot_token_ref="env:SLACK_BOT_TOKEN_ACME",
            signing_secret_ref="env:SLACK_SIGNING_SECRET_ACME",
            channels={"finance": FINANCE_CHANNEL},
        )
        workers(
            1,
            interval="0.2",
            env={
                "SLACK_API_BASE_URL": slack_api.origin + "/api/",
                "SLACK_BOT_TOKEN_ACME": BOT_TOKEN,
                "SLACK_SIGNING_SECRET_ACME": SIGNING_SECRET,
                "NOTIFY_READ_TIMEOUT_SECONDS": HANGING_CALLS_WAIT,
            },
        )
        factories.submit(agent)  # a request for the finance group: the worker posts it to Slack
        slack_call = wait_until(slack_api.server.first_held, "the worker calling Slack", timeout=DEADLINE)

        proposal, decision = approve(agent, reviewer_a, fake_agent.open_task())

        wait_until(lambda: delivered(proposal), "the approval delivered", timeout=DEADLINE)
        assert not slack_call.given_up.is_set()  # delivered while the Slack call still waits for an answer
        (received,) = fake_agent.decisions_received()
        assert received.message_id == f"decision-{decision.jti}"
    finally:
        slack_api.stop()


def test_a_webhook_endpoint_that_never_answers_holds_back_no_other_and_gets_its_webhooks_later(
    workers, settings, tenant, agent, refund_policy
):
    """`stuck` stands in for a tenant's webhook endpoint that accepts a connection and never answers (a
    hung server or proxy), then, once the test closes that connection, answers as a working one does;
    `working` for another endpoint. Both verify every request with the standardwebhooks library."""
    settings.NOTIFY_ALLOW_HTTP = True  # the loopback endpoints speak plain HTTP
    stuck, working = HangingWebhookReceiver(), WebhookReceiver()
    try:
        events = ["proposal.awaiting_review"]
        stuck_endpoint = register_endpoint(tenant=tenant, url=stuck.origin + "/hooks", events=events)
        working_endpoint = register_endpoint(tenant=tenant, url=working.origin + "/hooks", events=events)
        stuck.secret, working.secret = stuck_endpoint.secret, working_endpoint.secret
        for _ in range(3):  # before the worker starts: its first feed queues all six webhooks at once
            factories.submit(agent)
        workers(
            1,
            interval="0.2",
            env={
                "NOTIFY_ALLOW_HTTP": "true",
                "NOTIFY_READ_TIMEOUT_SECONDS": HANGING_CALLS_WAIT,
                "NOTIFY_TARGET_BACKOFF_SECONDS": "1",
            },
        )

        wait_until(lambda: len(working.verified) == 3, "the working endpoint's webhooks", timeout=DEADLINE)
        hanging = stuck.server
        assert isinstance(hanging, Hanging)
        stuck_call = hanging.first_held()
        assert stuck_call is not None and not stuck_call.given_up.is_set()  # still waiting meanwhile

        hanging.release()  # the hung connection ends with no answer: the endpoint failed
        rows = OutboxMessage.objects.filter(payload__endpoint=stuck_endpoint.pk)
        wait_until(
            lambda: not rows.exclude(status=OutboxMessage.Status.DELIVERED).exists(),
            "the stuck endpoint's webhooks delivered later",
            timeout=DEADLINE,
        )
        assert sorted(v["id"] for v in stuck.verified) == sorted(row.message_id for row in rows)  # none lost
        assert len(rows) == 3
    finally:
        stuck.stop()
        working.stop()
