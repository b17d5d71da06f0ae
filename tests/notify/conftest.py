"""Fixtures of the notification tests: the Slack stand-in (tests/notify/slack_standin.py) and a tenant's
Slack workspace whose secrets come from the environment, as an operator would configure them; a Teams
channel whose Workflows webhook is the loopback stand-in (tests/notify/teams_standin.py); and Web Push
with a VAPID key and a loopback push service (tests/notify/receivers.py); a Teams bot whose Bot
Framework services are the loopback stand-in tests/notify/teams_bot_standin.py."""

import pytest
from py_vapid import Vapid02

from approvals.models.notifications import SlackWorkspace, TeamsBot, TeamsChannel
from approvals.notify import push, teams_bot
from tests.notify.receivers import PushService
from tests.notify.slack_requests import FINANCE_CHANNEL, SIGNING_SECRET, TEAM
from tests.notify.slack_standin import BOT_TOKEN, SlackStandIn
from tests.notify.teams_bot_standin import APP_ID, APP_PASSWORD, CONVERSATION, BotFrameworkStandIn
from tests.notify.teams_standin import TeamsWebhook


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


@pytest.fixture
def channel(settings, tenant, monkeypatch):
    """A Teams channel following the finance group; yields the webhook stand-in that takes its cards."""
    webhook = TeamsWebhook()
    settings.AGENT_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.NOTIFY_ALLOW_HTTP = True  # the loopback stand-in speaks plain HTTP
    monkeypatch.setenv("TEAMS_FINANCE_WEBHOOK", webhook.url)
    TeamsChannel.objects.create(
        tenant=tenant,
        name="Finance approvals",
        webhook_url_ref="env:TEAMS_FINANCE_WEBHOOK",
        groups=["finance"],
    )
    yield webhook
    webhook.stop()


@pytest.fixture
def bot_framework(settings):
    """The Bot Framework's login service and Bot Connector, as a loopback stand-in
    (tests/notify/teams_bot_standin.py)."""
    standin = BotFrameworkStandIn()
    settings.TEAMS_BOT_OPENID_METADATA_URL = standin.origin + "/v1/.well-known/openidconfiguration"
    settings.TEAMS_BOT_TOKEN_URL = standin.origin + "/botframework.com/oauth2/v2.0/token"
    settings.AGENT_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.NOTIFY_ALLOW_HTTP = True  # the loopback stand-in speaks plain HTTP
    teams_bot.forget_cached()
    yield standin
    teams_bot.forget_cached()
    standin.stop()


@pytest.fixture
def bot_channel(tenant, monkeypatch, bot_framework):
    """The tenant's Teams bot and a channel it posts finance's requests to."""
    monkeypatch.setenv("TEAMS_BOT_PASSWORD_ACME", APP_PASSWORD)
    bot = TeamsBot.objects.create(
        tenant=tenant,
        app_id=APP_ID,
        app_password_ref="env:TEAMS_BOT_PASSWORD_ACME",
        service_url=bot_framework.service_url,
    )
    return TeamsChannel.objects.create(
        tenant=tenant, name="Finance approvals", bot=bot, conversation_id=CONVERSATION, groups=["finance"]
    )


@pytest.fixture
def vapid_key(settings, tmp_path):
    key = Vapid02()
    key.generate_keys()
    path = tmp_path / "vapid.pem"
    key.save_key(str(path))
    settings.WEB_PUSH_VAPID_PRIVATE_KEY_FILE = str(path)
    settings.WEB_PUSH_CONTACT = "mailto:ops@example.test"
    push._vapid.cache_clear()
    return key


@pytest.fixture
def push_service(settings, vapid_key):
    service = PushService(vapid_key.public_key)
    settings.WEB_PUSH_SERVICE_HOSTS = ["127.0.0.1"]
    settings.NOTIFY_ALLOW_HTTP = True  # the loopback push service speaks plain HTTP
    settings.AGENT_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    yield service
    service.stop()
