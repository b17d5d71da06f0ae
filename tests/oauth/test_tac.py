"""Reviewer as the OAuth Transaction Authorization Challenge's authorization server: a resource's
challenge in, a proposal routed through policy and people, the decision token out
(docs/protect-an-api.md). Through Django's test client; the run over HTTP is
tests/e2e/test_protected_api_e2e.py."""

import base64
from datetime import timedelta
from urllib.parse import urlencode

import jwt
import pytest
import time_machine
from django.conf import settings
from django.utils import timezone

from approvals.models import Decision, PolicyVersion, Proposal
from approvals.states import State
from audit.models import AuditEvent, Verb
from oauth.models import TransactionAuthorization
from oauth.services import register_resource
from reviewer_gate import gate
from tests import factories
from tests.oauth.challenges import REFUND_DETAIL, RESOURCE_AUDIENCE, ChallengeKey, challenge_claims
from tests.oauth.conftest import BOT_TOKEN, RESOURCE_TOKEN

ENDPOINT = "/oauth/txn-authorization"


def form_post(client, data: dict, **extra):
    """A form-urlencoded POST (RFC 6749 §3.2), as OAuth clients send it."""
    return client.post(ENDPOINT, urlencode(data), content_type="application/x-www-form-urlencoded", **extra)


def basic(client_id: str, secret: str) -> dict:
    return {"HTTP_AUTHORIZATION": "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()}


def relay(client, challenge: str, *, auth=("refund-bot", BOT_TOKEN)):
    return form_post(client, {"transaction_challenge": challenge}, **basic(*auth))


def poll(client, transaction_id: str, *, auth=("refund-bot", BOT_TOKEN)):
    return form_post(client, {"transaction_authorization_id": transaction_id}, **basic(*auth))


def signed(key: ChallengeKey, **overrides) -> str:
    return key.sign(challenge_claims(settings.REVIEWER_ISSUER, **overrides))


def claims_of(token: str) -> dict:
    return jwt.decode(token, options={"verify_signature": False})


@pytest.fixture
def two_people_policy(tenant):
    return factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 2}]
    )


# ---------------------------------------------------------------------------------------------------
# A challenge taken in


def test_a_challenge_becomes_a_proposal_of_the_resource_and_answers_a_transaction(
    client, resource, bot, two_people_policy, challenge_key
):
    claims = challenge_claims(settings.REVIEWER_ISSUER)
    response = relay(client, challenge_key.sign(claims))

    assert response.status_code == 200, response.content
    assert response["Cache-Control"] == "no-store"
    body = response.json()
    proposal = Proposal.objects.get()
    assert body == {
        "transaction_authorization_id": str(TransactionAuthorization.objects.get().id),
        "authorization_uri": f"{settings.REVIEWER_ISSUER}/proposals/{proposal.id}/",
        "expires_in": body["expires_in"],
        "interval": settings.OAUTH_POLL_INTERVAL_SECONDS,
    }
    assert 3500 < body["expires_in"] <= 3600
    assert proposal.agent == resource.agent
    assert proposal.state == State.AWAITING_REVIEW
    assert (proposal.task_id, proposal.request_id) == (claims["txn"], f"tac-{claims['jti']}")
    assert proposal.action == {"tool": "payments.refund", "arguments": REFUND_DETAIL}
    assert proposal.summary == claims["reason"]
    assert proposal.principal_id == "agent:refund-bot"
    assert proposal.consequences == {"amount": "740.00", "currency": "EUR"}
    assert proposal.token_claims == {"txn": claims["txn"], "authorization_details": [REFUND_DETAIL]}
    accepted = AuditEvent.objects.get(verb=Verb.TXN_CHALLENGE_ACCEPTED)
    assert accepted.actor == "agent:refund-bot" and accepted.data["resource"] == "refunds-api"


def test_the_challenge_sub_names_the_principal_when_the_resource_knows_it(
    client, resource, bot, two_people_policy, challenge_key
):
    relay(client, signed(challenge_key, sub="requester"))

    assert Proposal.objects.get().principal_id == "requester"


def test_relaying_the_same_challenge_again_files_nothing_new(
    client, resource, bot, two_people_policy, challenge_key
):
    challenge = signed(challenge_key)

    first = relay(client, challenge).json()
    again = relay(client, challenge).json()

    assert again["transaction_authorization_id"] == first["transaction_authorization_id"]
    assert Proposal.objects.count() == 1
    assert AuditEvent.objects.filter(verb=Verb.TXN_CHALLENGE_ACCEPTED).count() == 1


def test_an_es256_challenge_is_accepted(client, tenant, bot, two_people_policy):
    key = ChallengeKey(kind="P-256", kid="ec-1")
    register_resource(
        tenant=tenant,
        slug="refunds-api",
        name="Refunds API",
        audience=RESOURCE_AUDIENCE,
        jwks=key.public_jwk(),
        types={"refund": "payments.refund"},
        api_token=RESOURCE_TOKEN,
    )

    assert relay(client, signed(key)).status_code == 200


# ---------------------------------------------------------------------------------------------------
# Polling, and the token


def test_polling_answers_pending_then_slow_down_when_too_soon(
    client, resource, bot, two_people_policy, challenge_key
):
    transaction_id = relay(client, signed(challenge_key)).json()["transaction_authorization_id"]

    first = poll(client, transaction_id)
    too_soon = poll(client, transaction_id)

    assert (first.status_code, first.json()["error"]) == (400, "authorization_pending")
    assert (too_soon.status_code, too_soon.json()["error"]) == (400, "slow_down")
    row = TransactionAuthorization.objects.get()
    assert row.interval == settings.OAUTH_POLL_INTERVAL_SECONDS + 5
    with time_machine.travel(timezone.now() + timedelta(seconds=row.interval + 1)):
        assert poll(client, transaction_id).json()["error"] == "authorization_pending"


def test_an_approval_by_two_people_answers_the_decision_token_for_the_resource(
    client, resource, bot, two_people_policy, challenge_key, reviewer_a, reviewer_b
):
    claims = challenge_claims(settings.REVIEWER_ISSUER)
    transaction_id = relay(client, challenge_key.sign(claims)).json()["transaction_authorization_id"]
    proposal = Proposal.objects.get()
    factories.vote(proposal, reviewer_a)
    factories.vote(proposal, reviewer_b)

    response = poll(client, transaction_id)

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["token_type"] == "Bearer"
    assert body["authorization_details"] == [REFUND_DETAIL]
    assert 0 < body["expires_in"] <= 3600
    token = claims_of(body["access_token"])
    assert token["aud"] == RESOURCE_AUDIENCE
    assert token["txn"] == claims["txn"]
    assert token["authorization_details"] == [REFUND_DETAIL]
    assert token["consume"] is True and token["decision"] == "approved"
    assert token["sub"] == claims["txn"] and token["request_id"] == f"tac-{claims['jti']}"
    # The agent-side gate verifies it as any decision (it ignores the two profile claims).
    verified = gate.Gate(
        issuer=settings.REVIEWER_ISSUER,
        audience=RESOURCE_AUDIENCE,
        keys=gate.StaticKeySource(client.get("/.well-known/jwks.json").json()),
        used_store=gate.MemoryUsedStore(),
    ).verify(
        body["access_token"],
        task_id=claims["txn"],
        request_id=f"tac-{claims['jti']}",
        action_digest=proposal.action_digest,
    )
    assert verified.approved
    # The resource consumes it with its own API token, once.
    consume = f"/api/v1/decisions/{token['jti']}/consume"
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {RESOURCE_TOKEN}"}
    assert (
        client.post(consume, {"rev": token["rev"]}, content_type="application/json", **bearer).status_code
        == 200
    )
    again = client.post(consume, {"rev": token["rev"]}, content_type="application/json", **bearer)
    assert (again.status_code, again.json()["error"]["code"]) == (409, "consumed")
    # The calling agent cannot consume it: the decision belongs to the resource's registration.
    as_bot = client.post(
        consume,
        {"rev": token["rev"]},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {BOT_TOKEN}",
    )
    assert as_bot.status_code == 404


def test_a_tac_decision_is_consumed_online_even_where_the_policy_does_not_ask_it(
    client, tenant, resource, bot, challenge_key, reviewer_a
):
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund", consume_online=False)
    transaction_id = relay(client, signed(challenge_key)).json()["transaction_authorization_id"]
    factories.vote(Proposal.objects.get(), reviewer_a)

    token = claims_of(poll(client, transaction_id).json()["access_token"])

    assert token["consume"] is True
    assert Decision.objects.get().consume_required is True


def test_policy_allow_answers_the_token_at_once(client, tenant, resource, bot, challenge_key):
    factories.make_policy(
        tenant, "small", tool_pattern="payments.refund", outcome=PolicyVersion.Outcome.ALLOW
    )

    response = relay(client, signed(challenge_key))

    assert response.status_code == 200
    assert claims_of(response.json()["access_token"])["decision"] == "approved"
    assert response.json()["authorization_details"] == [REFUND_DETAIL]


def test_policy_deny_answers_access_denied_at_once(client, tenant, resource, bot, challenge_key):
    factories.make_policy(tenant, "never", tool_pattern="payments.refund", outcome=PolicyVersion.Outcome.DENY)

    response = relay(client, signed(challenge_key))

    assert (response.status_code, response.json()["error"]) == (400, "access_denied")


def test_a_rejection_answers_access_denied_with_the_reason(
    client, resource, bot, two_people_policy, challenge_key, reviewer_a
):
    transaction_id = relay(client, signed(challenge_key)).json()["transaction_authorization_id"]
    factories.vote(Proposal.objects.get(), reviewer_a, verdict="reject", reason="customer already refunded")

    body = poll(client, transaction_id).json()

    assert body == {"error": "access_denied", "error_description": "customer already refunded"}


def test_an_expired_request_answers_expired_token(client, resource, bot, two_people_policy, challenge_key):
    from approvals.services.reconcile import expire_due

    transaction_id = relay(client, signed(challenge_key)).json()["transaction_authorization_id"]
    with time_machine.travel(timezone.now() + timedelta(hours=2)):
        expire_due()
        assert poll(client, transaction_id).json()["error"] == "expired_token"


def test_another_client_cannot_poll_a_transaction(
    client, tenant, resource, bot, two_people_policy, challenge_key
):
    factories.make_agent(tenant, "other-bot", card_url="", api_token="other-secret", push_token="p2")
    transaction_id = relay(client, signed(challenge_key)).json()["transaction_authorization_id"]

    response = poll(client, transaction_id, auth=("other-bot", "other-secret"))

    assert response.json()["error"] == "invalid_grant"


# ---------------------------------------------------------------------------------------------------
# Bad input: the standard's error, and nothing changes


def refused_with(response, status: int, error: str) -> None:
    assert (response.status_code, response.json()["error"]) == (status, error), response.content
    assert Proposal.objects.count() == 0
    assert TransactionAuthorization.objects.count() == 0


@pytest.mark.parametrize(
    "overrides, header, error",
    [
        ({"exp": 1_000_000_000, "iat": 999_999_900}, {}, "invalid_grant"),  # expired
        ({"iss": "https://unregistered.example.test"}, {}, "invalid_grant"),
        ({"aud": "https://another-as.example.test"}, {}, "invalid_grant"),
        ({"txn": None}, {}, "invalid_grant"),
        ({"act": None}, {}, "invalid_grant"),
        ({}, {"typ": "JWT"}, "invalid_grant"),
        ({}, {"kid": "unknown"}, "invalid_grant"),
        (
            {"authorization_details": [{"type": "wire_transfer", "amount": "1.00"}]},
            {},
            "invalid_authorization_details",
        ),
        ({"authorization_details": [{"type": "refund", "amount": 740}]}, {}, "invalid_authorization_details"),
        (
            {"authorization_details": [dict(REFUND_DETAIL), dict(REFUND_DETAIL)]},
            {},
            "invalid_authorization_details",
        ),
        ({"authorization_details": {"type": "refund"}}, {}, "invalid_authorization_details"),
    ],
    ids=[
        "expired",
        "unregistered resource",
        "for another server",
        "no txn",
        "no act",
        "wrong typ",
        "unknown kid",
        "unknown type",
        "a number",
        "two details",
        "not an array",
    ],
)
def test_a_bad_challenge_is_refused_and_changes_nothing(
    client, resource, bot, two_people_policy, challenge_key, overrides, header, error
):
    challenge = challenge_key.sign(challenge_claims(settings.REVIEWER_ISSUER, **overrides), **header)

    refused_with(relay(client, challenge), 400, error)


def test_an_unsigned_challenge_is_refused(client, resource, bot, two_people_policy):
    unsigned = jwt.encode(
        challenge_claims(settings.REVIEWER_ISSUER),
        None,  # type: ignore[arg-type]  # PyJWT's stubs omit the key "none" takes
        algorithm="none",
        headers={"typ": "txn-authz-challenge+jwt"},
    )

    refused_with(relay(client, unsigned), 400, "invalid_grant")


def test_a_challenge_signed_by_another_key_is_refused(client, resource, bot, two_people_policy):
    thief = ChallengeKey()  # same kid, another key

    refused_with(relay(client, signed(thief)), 400, "invalid_grant")


def test_a_challenge_that_is_not_a_jws_is_refused(client, resource, bot):
    refused_with(relay(client, "not-a-challenge"), 400, "invalid_request")


def test_a_challenge_used_by_one_client_is_refused_to_another(
    client, tenant, resource, bot, two_people_policy, challenge_key
):
    factories.make_agent(tenant, "other-bot", card_url="", api_token="other-secret", push_token="p2")
    challenge = signed(challenge_key)
    relay(client, challenge)

    response = relay(client, challenge, auth=("other-bot", "other-secret"))

    assert response.json()["error"] == "invalid_grant"
    assert Proposal.objects.count() == 1 and TransactionAuthorization.objects.count() == 1


def test_a_used_jti_with_other_contents_is_refused(client, resource, bot, two_people_policy, challenge_key):
    claims = challenge_claims(settings.REVIEWER_ISSUER)
    relay(client, challenge_key.sign(claims))
    changed = {
        **claims,
        "txn": "another-txn",
        "authorization_details": [{**REFUND_DETAIL, "amount": "9000.00"}],
    }

    response = relay(client, challenge_key.sign(changed))

    assert response.json()["error"] == "invalid_grant"
    assert Proposal.objects.count() == 1


def test_a_resource_of_another_tenant_is_refused_to_this_client(client, other_tenant, bot, challenge_key):
    register_resource(
        tenant=other_tenant,
        slug="globex-refunds",
        name="Globex refunds",
        audience=RESOURCE_AUDIENCE,
        jwks=challenge_key.public_jwk(),
        types={"refund": "payments.refund"},
        api_token="globex-secret",
    )

    refused_with(relay(client, signed(challenge_key)), 400, "unauthorized_client")


# ---------------------------------------------------------------------------------------------------
# Client authentication


def test_no_client_credentials_are_invalid_client(client, resource, bot, challenge_key):
    response = form_post(client, {"transaction_challenge": signed(challenge_key)})

    refused_with(response, 401, "invalid_client")
    assert response["WWW-Authenticate"] == 'Basic realm="reviewer"'


def test_a_wrong_secret_is_invalid_client(client, resource, bot, challenge_key):
    refused_with(relay(client, signed(challenge_key), auth=("refund-bot", "wrong")), 401, "invalid_client")


def test_another_agents_slug_with_this_secret_is_invalid_client(client, resource, bot, challenge_key):
    refused_with(relay(client, signed(challenge_key), auth=("refunds-api", BOT_TOKEN)), 401, "invalid_client")


def test_client_secret_post_and_the_bearer_api_token_authenticate_too(
    client, resource, bot, two_people_policy, challenge_key
):
    posted = form_post(
        client,
        {
            "transaction_challenge": signed(challenge_key),
            "client_id": "refund-bot",
            "client_secret": BOT_TOKEN,
        },
    )
    bearer = form_post(
        client, {"transaction_challenge": signed(challenge_key)}, HTTP_AUTHORIZATION=f"Bearer {BOT_TOKEN}"
    )

    assert posted.status_code == 200 and bearer.status_code == 200
    assert Proposal.objects.count() == 2


def test_the_resource_itself_cannot_relay_its_challenges(client, resource, two_people_policy, challenge_key):
    refused_with(
        relay(client, signed(challenge_key), auth=("refunds-api", RESOURCE_TOKEN)), 400, "unauthorized_client"
    )


def test_a_request_with_both_parameters_or_neither_is_invalid_request(client, resource, bot, challenge_key):
    both = form_post(
        client,
        {"transaction_challenge": signed(challenge_key), "transaction_authorization_id": "x"},
        **basic("refund-bot", BOT_TOKEN),
    )
    neither = form_post(client, {}, **basic("refund-bot", BOT_TOKEN))

    refused_with(both, 400, "invalid_request")
    refused_with(neither, 400, "invalid_request")


def test_the_endpoint_answers_only_post(client):
    assert client.get(ENDPOINT).status_code == 405


def test_the_server_metadata_names_the_endpoints(client):
    body = client.get("/.well-known/oauth-authorization-server").json()

    assert body["issuer"] == settings.REVIEWER_ISSUER
    assert body["transaction_authorization_endpoint"] == f"{settings.REVIEWER_ISSUER}/oauth/txn-authorization"
    assert body["backchannel_token_delivery_modes_supported"] == ["poll"]


@pytest.mark.parametrize(
    "path", [ENDPOINT, "/bc-authorize", "/oauth/token", "/.well-known/oauth-authorization-server"]
)
def test_the_doors_take_the_agents_slots_never_the_peoples(path):
    from reviewer.overload import share_of

    assert share_of(path) == "agents"


def test_a_halted_resource_answers_temporarily_unavailable_and_stores_nothing(
    client, resource, bot, two_people_policy, challenge_key, admin_user
):
    from approvals.models import Halt
    from approvals.services.halts import halt

    halt(scope=Halt.Scope.AGENT, agent=resource.agent, reason="incident", actor=admin_user)

    response = relay(client, signed(challenge_key))

    refused_with(response, 503, "temporarily_unavailable")
    assert response["Retry-After"] == "30"
