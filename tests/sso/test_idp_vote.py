"""A vote confirmed by a fresh sign-in at the tenant's provider (the loopback provider in
tests/sso/oidc_idp, standing in for the company's IdP): the decision form and the socket take the kept
confirmation, and the decision token records `{"method": "idp", "acr", "amr"}` in approvers[].auth. The
sign-in session alone, or a confirmation made for another proposal or digest, does not count."""

import json

import jwt
import pytest
from channels.db import database_sync_to_async
from django.contrib.sessions.backends.db import SessionStore
from django.test import Client
from django.utils.http import urlencode

from approvals.models import Decision, Proposal, Vote
from approvals.states import State
from audit.labels import actor_label
from audit.models import AuditEvent, Verb
from sso.models import ExternalIdentity
from sso.oidc import idp_step_up
from tenants.models import ProviderGroupMapping
from tests import factories
from tests.sso.conftest import sign_in_through_provider

ACR, AMR = "urn:acme:mfa", ["pwd", "otp"]


@pytest.fixture
def idp_tenant(identity_provider, tenant):
    identity_provider.step_up = "idp"
    identity_provider.step_up_acr = ACR
    identity_provider.step_up_amr = " ".join(AMR)
    identity_provider.save()
    finance = factories.make_group(tenant, "finance")
    ProviderGroupMapping.objects.create(tenant=tenant, external_name="payments-approvers", group=finance)
    return identity_provider


@pytest.fixture
def proposal(agent, refund_policy, requester):
    return factories.submit(agent)


def signed_in(client, oidc_idp):
    oidc_idp.add_user("uma", email="uma@acme.example", groups=["payments-approvers"], acr=ACR, amr=AMR)
    sign_in_through_provider(client, oidc_idp, "uma")
    return ExternalIdentity.objects.get(issuer=oidc_idp.issuer).user


def confirm_at_provider(client, oidc_idp, proposal_id, digest):
    start = client.get(f"/accounts/sso/step-up/{proposal_id}/?" + urlencode({"digest": digest}))
    assert start.status_code == 302, start.content[:300]
    back = client.get(oidc_idp.sign_in(start["Location"], "uma").removeprefix("http://testserver"))
    assert back.status_code == 302, back.content[:500]


def approve(client, proposal):
    return client.post(
        f"/proposals/{proposal.id}/decide",
        {"action": "approve", "digest": proposal.action_digest, "reason": "", "otp_code": ""},
    )


def approver_auth(proposal) -> dict:
    token = Decision.objects.get(proposal=proposal).token
    return jwt.decode(token, options={"verify_signature": False})["approvers"][0]["auth"]


@pytest.mark.django_db
def test_a_vote_confirmed_at_the_provider_is_recorded_as_idp_in_the_decision_token(
    client, oidc_idp, idp_tenant, proposal
):
    user = signed_in(client, oidc_idp)
    page = client.get(f"/proposals/{proposal.id}/")
    assert b"Confirm at Acme IdP" in page.content
    confirm_at_provider(client, oidc_idp, proposal.id, proposal.action_digest)
    assert b"Confirmed at Acme IdP for this version" in client.get(f"/proposals/{proposal.id}/").content

    assert approve(client, proposal).status_code == 302

    proposal.refresh_from_db()
    assert proposal.state == State.APPROVED
    auth = approver_auth(proposal)
    assert {key: auth[key] for key in ("method", "acr", "amr")} == {"method": "idp", "acr": ACR, "amr": AMR}
    assert auth["at"].endswith("Z")
    cast = AuditEvent.objects.get(verb=Verb.VOTE_CAST, actor=actor_label(user))
    assert cast.data["auth"]["method"] == "idp" and cast.data["auth"]["amr"] == AMR


@pytest.mark.django_db
def test_the_sign_in_session_alone_does_not_confirm_a_vote(client, oidc_idp, idp_tenant, proposal):
    user = signed_in(client, oidc_idp)

    answer = approve(client, proposal)

    assert answer.status_code == 403 and b"needs a fresh one-time code" in answer.content
    assert not Vote.objects.filter(voter=user).exists()
    assert Proposal.objects.get(pk=proposal.pk).state == State.AWAITING_REVIEW
    assert AuditEvent.objects.filter(verb=Verb.STEP_UP_FAILED, data__code="step_up_required").exists()


@pytest.mark.django_db
def test_the_sign_in_session_alone_does_not_confirm_a_vote_within_a_policys_window(
    client, oidc_idp, idp_tenant, agent, tenant, requester
):
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund", step_up="900", thresholds=None)
    proposal = factories.submit(agent)
    user = signed_in(client, oidc_idp)

    assert approve(client, proposal).status_code == 403
    assert not Vote.objects.filter(voter=user).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("other", ["digest", "proposal"])
def test_a_confirmation_made_for_another_digest_or_proposal_does_not_count(
    client, oidc_idp, idp_tenant, proposal, agent, other
):
    user = signed_in(client, oidc_idp)
    if other == "digest":
        confirm_at_provider(client, oidc_idp, proposal.id, "sha256:" + "0" * 64)
    else:
        second = factories.submit(agent, task_id="task-2", context_id="ctx-2")
        confirm_at_provider(client, oidc_idp, second.id, second.action_digest)

    answer = approve(client, proposal)

    assert answer.status_code == 403
    assert not Vote.objects.filter(voter=user, proposal=proposal).exists()


@pytest.mark.django_db
def test_a_provider_confirmation_does_not_count_where_the_tenant_confirms_votes_with_its_own_factors(
    client, oidc_idp, idp_tenant, proposal
):
    user = signed_in(client, oidc_idp)
    confirm_at_provider(client, oidc_idp, proposal.id, proposal.action_digest)
    idp_tenant.step_up = "local"
    idp_tenant.save()

    assert approve(client, proposal).status_code == 403
    assert not Vote.objects.filter(voter=user).exists()


def test_the_service_refuses_a_provider_step_up_bound_to_another_digest(db, proposal, idp_tenant, reviewer_a):
    from accounts.stepup import IDP, ProviderStepUp
    from approvals.services.votes import cast_vote
    from lib.errors import VoteRefused

    wrong = ProviderStepUp(IDP, None, bound_to=(str(proposal.id), "sha256:" + "0" * 64), acr=ACR)
    with pytest.raises(VoteRefused) as refused:
        cast_vote(
            proposal.id, reviewer_a, verdict="approve", digest_seen=proposal.action_digest, step_up=wrong
        )
    assert refused.value.code == "step_up_failed" and "identity provider" in refused.value.message
    assert not Vote.objects.filter(proposal=proposal).exists()


# ---------------------------------------------------------------------------------------------------
# Over the socket: the confirmation arrives after the socket connected


@pytest.mark.django_db(transaction=True)
async def test_a_vote_over_the_socket_takes_the_confirmation_made_after_it_connected(
    oidc_idp, idp_tenant, proposal
):
    from tests.approvals.test_consumers import connected, proposal_path, reply_to, vote

    client = Client()
    await database_sync_to_async(signed_in)(client, oidc_idp)
    session_id = client.cookies["sessionid"].value
    communicator = await connected(proposal_path(proposal), session_id)
    await database_sync_to_async(confirm_at_provider)(client, oidc_idp, proposal.id, proposal.action_digest)

    reply = await reply_to(communicator, vote(proposal))

    assert reply["type"] == "vote.recorded" and reply["state"] == "approved", json.dumps(reply)
    auth = await database_sync_to_async(approver_auth)(proposal)
    assert (auth["method"], auth["acr"], auth["amr"]) == ("idp", ACR, AMR)
    store = await database_sync_to_async(lambda: dict(SessionStore(session_key=session_id).load()))()
    assert idp_step_up.SESSION_KEY not in store  # used up
    await communicator.disconnect()
