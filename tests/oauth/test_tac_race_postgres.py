"""A challenge relayed twice at the same moment by two clients, on two database connections
(PostgreSQL: the jti's unique constraint decides): exactly one transaction, one proposal; the other
client is refused `invalid_grant`."""

import pytest
from django.conf import settings

from approvals.models import Proposal
from oauth.errors import OAuthError
from oauth.models import TransactionAuthorization
from oauth.tac.services import accept_challenge
from tests import factories
from tests.concurrency import requires_postgres, run_together
from tests.oauth.challenges import challenge_claims


@pytest.mark.postgres
@requires_postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(3))
def test_two_clients_relaying_one_challenge_at_once_get_one_transaction(
    tenant, resource, bot, challenge_key, attempt
):
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 2}]
    )
    other = factories.make_agent(tenant, "other-bot", card_url="", api_token="other-secret", push_token="p2")
    challenge = challenge_key.sign(challenge_claims(settings.REVIEWER_ISSUER))

    results = run_together(
        lambda: accept_challenge(bot, challenge), lambda: accept_challenge(other, challenge)
    )

    accepted = [result for result in results if not isinstance(result, Exception)]
    refused = [result for result in results if isinstance(result, OAuthError)]
    assert len(accepted) == 1 and len(refused) == 1, results
    assert refused[0].error == "invalid_grant"
    assert TransactionAuthorization.objects.count() == 1 and Proposal.objects.count() == 1
    assert TransactionAuthorization.objects.get().proposal_id == Proposal.objects.get().id
