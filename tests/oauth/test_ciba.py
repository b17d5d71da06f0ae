"""OpenID CIBA (poll mode) with RFC 9396 RAR at /bc-authorize and /oauth/token, through Django's test
client; auth0-python's calls over TLS are tests/e2e/test_protected_api_e2e.py."""

import json
from datetime import timedelta
from urllib.parse import urlencode

import jwt
import pytest
import time_machine
from django.utils import timezone

from approvals.models import Proposal
from audit.models import AuditEvent, Verb
from oauth.models import BackchannelRequest
from tests import factories
from tests.oauth.challenges import REFUND_DETAIL
from tests.oauth.conftest import BOT_TOKEN

FORM = "application/x-www-form-urlencoded"
GRANT = "urn:openid:params:grant-type:ciba"


def authorize(client, **fields):
    data = {
        "client_id": "refund-bot",
        "client_secret": BOT_TOKEN,
        "scope": "openid",
        "login_hint": "requester",
        "binding_message": "Refund 1182: code K7Q2",
        "authorization_details": json.dumps([REFUND_DETAIL]),
        **fields,
    }
    return client.post(
        "/bc-authorize", urlencode({k: v for k, v in data.items() if v is not None}), content_type=FORM
    )


def redeem(client, auth_req_id: str, *, as_json: bool = False, grant: str = GRANT):
    data = {
        "client_id": "refund-bot",
        "client_secret": BOT_TOKEN,
        "grant_type": grant,
        "auth_req_id": auth_req_id,
    }
    if as_json:  # as auth0-python sends it
        return client.post("/oauth/token", json.dumps(data), content_type="application/json")
    return client.post("/oauth/token", urlencode(data), content_type=FORM)


@pytest.fixture
def ciba_world(resource, bot, requester, tenant):
    return factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 1}]
    )


def test_a_backchannel_request_files_a_proposal_for_the_named_principal(client, ciba_world):
    response = authorize(client)

    assert response.status_code == 200, response.content
    body = response.json()
    row = BackchannelRequest.objects.get()
    assert body == {"auth_req_id": str(row.id), "expires_in": body["expires_in"], "interval": 5}
    proposal = Proposal.objects.get()
    assert proposal.agent.slug == "refund-bot" and proposal.principal_id == "requester"
    assert proposal.action == {"tool": "payments.refund", "arguments": REFUND_DETAIL}
    assert proposal.consequences["binding_message"] == "Refund 1182: code K7Q2"
    assert proposal.token_claims == {"authorization_details": [REFUND_DETAIL]}
    assert AuditEvent.objects.get(verb=Verb.BACKCHANNEL_REQUESTED).data["principal"] == "requester"


def test_the_binding_message_is_shown_beside_the_consequence_escaped(client, ciba_world, reviewer_a):
    authorize(client, binding_message='<script>alert("x")</script> code K7Q2')
    proposal = Proposal.objects.get()
    factories.sign_in_verified(client, reviewer_a)

    page = client.get(f"/proposals/{proposal.id}/").content.decode()

    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; code K7Q2" in page
    assert '<script>alert("x")' not in page
    assert "740.00" in page  # the consequence is still there, beside it


def test_the_token_endpoint_answers_pending_then_the_approved_token(client, ciba_world, reviewer_a):
    auth_req_id = authorize(client).json()["auth_req_id"]
    assert redeem(client, auth_req_id).json()["error"] == "authorization_pending"
    factories.vote(Proposal.objects.get(), reviewer_a)

    with time_machine.travel(timezone.now() + timedelta(seconds=6)):
        response = redeem(client, auth_req_id, as_json=True)

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["token_type"] == "Bearer" and body["authorization_details"] == [REFUND_DETAIL]
    claims = jwt.decode(body["access_token"], options={"verify_signature": False})
    assert claims["aud"] == "urn:agent:refund-bot"
    assert claims["authorization_details"] == [REFUND_DETAIL] and "txn" not in claims
    id_token = jwt.decode(body["id_token"], options={"verify_signature": False})
    assert (id_token["sub"], id_token["aud"]) == ("requester", "refund-bot")


def test_a_rejection_answers_access_denied(client, ciba_world, reviewer_a):
    auth_req_id = authorize(client).json()["auth_req_id"]
    factories.vote(Proposal.objects.get(), reviewer_a, verdict="reject", reason="not this one")

    assert redeem(client, auth_req_id).json() == {
        "error": "access_denied",
        "error_description": "not this one",
    }


@pytest.mark.parametrize(
    "fields, status, error",
    [
        ({"login_hint": "nobody"}, 400, "unknown_user_id"),
        ({"login_hint": None}, 400, "invalid_request"),
        ({"scope": "profile"}, 400, "invalid_scope"),
        ({"client_notification_token": "ping-me"}, 400, "invalid_request"),
        ({"binding_message": "x" * 201}, 400, "invalid_binding_message"),
        ({"binding_message": "two\nlines"}, 400, "invalid_binding_message"),
        ({"authorization_details": None}, 400, "invalid_authorization_details"),
        (
            {"authorization_details": json.dumps([{"type": "wire", "amount": "1"}])},
            400,
            "invalid_authorization_details",
        ),
        ({"authorization_details": "[{"}, 400, "invalid_authorization_details"),
        ({"requested_expiry": "-5"}, 400, "invalid_request"),
        ({"client_secret": "wrong"}, 401, "invalid_client"),
    ],
    ids=[
        "unknown principal",
        "no hint",
        "no openid",
        "ping mode",
        "long message",
        "control characters",
        "no details",
        "unknown type",
        "not json",
        "bad expiry",
        "wrong secret",
    ],
)
def test_a_bad_backchannel_request_is_refused_and_changes_nothing(client, ciba_world, fields, status, error):
    response = authorize(client, **fields)

    assert (response.status_code, response.json()["error"]) == (status, error), response.content
    assert Proposal.objects.count() == 0 and BackchannelRequest.objects.count() == 0


def test_a_principal_of_another_tenant_is_unknown(client, ciba_world, outsider):
    from tenants.models import TenantMembership

    TenantMembership.objects.filter(user=outsider).update(principal_id="globex-person")

    assert authorize(client, login_hint="globex-person").json()["error"] == "unknown_user_id"


def test_the_token_endpoint_refuses_other_grants_and_unknown_requests(client, ciba_world):
    assert redeem(client, "x", grant="client_credentials").json()["error"] == "unsupported_grant_type"
    assert redeem(client, "00000000-0000-0000-0000-000000000000").json()["error"] == "invalid_grant"
