"""Fixtures of the notification tests: the Slack stand-in (tests/notify/slack_standin.py) and a tenant's
Slack workspace whose secrets come from the environment, as an operator would configure them."""

import pytest

from approvals.models.notifications import SlackWorkspace
from tests.notify.slack_requests import FINANCE_CHANNEL, SIGNING_SECRET, TEAM
from tests.notify.slack_standin import BOT_TOKEN, SlackStandIn


@pytest.fixture
def slack(settings):
    standin = SlackStandIn().start()
    settings.SLACK_API_BASE_URL = standin.base_url
    yield standin
    standin.stop()


@pytest.fixture
def workspace(tenant, monkeypatch, slack):
    monkeypatch.setenv("SLACK_BOT_TOKEN_ACME", BOT_TOKEN)
    monkeypatch.setenv("SLACK_SIGNING_SECRET_ACME", SIGNING_SECRET)
    return SlackWorkspace.objects.create(
        tenant=tenant,
        team_id=TEAM,
        bot_token_ref="env:SLACK_BOT_TOKEN_ACME",
        signing_secret_ref="env:SLACK_SIGNING_SECRET_ACME",
        channels={"finance": FINANCE_CHANNEL},
    )
