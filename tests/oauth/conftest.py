import pytest

from approvals.models import Agent
from oauth.models import ProtectedResource
from oauth.services import register_resource
from tests import factories
from tests.oauth.challenges import RESOURCE_AUDIENCE, ChallengeKey

RESOURCE_TOKEN = "resource-secret"
BOT_TOKEN = "bot-secret"


@pytest.fixture
def challenge_key() -> ChallengeKey:
    return ChallengeKey()


@pytest.fixture
def resource(tenant, challenge_key) -> ProtectedResource:
    return register_resource(
        tenant=tenant,
        slug="refunds-api",
        name="Refunds API",
        audience=RESOURCE_AUDIENCE,
        jwks={"keys": [challenge_key.public_jwk()]},
        types={"refund": "payments.refund"},
        api_token=RESOURCE_TOKEN,
    )


@pytest.fixture
def bot(tenant) -> Agent:
    """The calling agent: a pull agent with its own registration (the OAuth client)."""
    return factories.make_agent(tenant, "refund-bot", card_url="", api_token=BOT_TOKEN, push_token="bot-push")
