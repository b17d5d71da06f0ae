"""A vote's step-up as a fresh sign-in at the tenant's provider, against the loopback provider
(tests/sso/oidc_idp, standing in for the company's IdP): `prompt=login` and `max_age=0` asked, the fresh
auth_time, acr and amr checked, the nonce bound to the proposal and digest, the proof usable once."""

import time

import pytest
from django.utils.http import urlencode

from sso.errors import SignInRefused
from sso.models import ExternalIdentity
from sso.oidc import idp_step_up
from tests import factories
from tests.sso.conftest import sign_in_through_provider

pytestmark = pytest.mark.django_db


@pytest.fixture
def idp_step_up_tenant(identity_provider):
    identity_provider.step_up = "idp"
    identity_provider.step_up_acr = "urn:acme:mfa"
    identity_provider.step_up_amr = "pwd otp"
    identity_provider.save()
    return identity_provider


@pytest.fixture
def proposal(agent, refund_policy, requester):
    return factories.submit(agent)


def signed_in_reviewer(client, oidc_idp, tenant, *, acr="urn:acme:mfa", amr=("pwd", "otp")):
    oidc_idp.add_user("uma", email="uma@acme.example", groups=[], acr=acr, amr=amr)
    sign_in_through_provider(client, oidc_idp, "uma")
    return ExternalIdentity.objects.get(issuer=oidc_idp.issuer).user


def test_a_fresh_confirmation_is_kept_for_this_proposal_and_digest(
    client, oidc_idp, idp_step_up_tenant, proposal, tenant
):
    user = signed_in_reviewer(client, oidc_idp, tenant)
    start = client.get(
        f"/accounts/sso/step-up/{proposal.id}/?" + urlencode({"digest": proposal.action_digest})
    )
    assert start.status_code == 302
    asked = start["Location"]
    assert "prompt=login" in asked and "max_age=0" in asked and "acr_values=urn%3Aacme%3Amfa" in asked

    back = oidc_idp.sign_in(asked, "uma")
    answer = client.get(back.removeprefix("http://testserver"))

    assert answer.status_code == 302
    session = client.session
    proved = idp_step_up.take(session, proposal.id, proposal.action_digest)
    assert proved["acr"] == "urn:acme:mfa" and proved["amr"] == ["pwd", "otp"]
    assert idp_step_up.take(session, proposal.id, proposal.action_digest) is None  # usable once
    assert client.get("/").status_code == 200  # still the same verified session
    assert user.is_authenticated


def test_a_sign_in_without_the_factors_the_tenant_names_is_refused(
    client, oidc_idp, idp_step_up_tenant, proposal, tenant
):
    signed_in_reviewer(client, oidc_idp, tenant, acr="urn:acme:password", amr=("pwd",))
    start = client.get(f"/accounts/sso/step-up/{proposal.id}/?digest={proposal.action_digest}")

    answer = client.get(oidc_idp.sign_in(start["Location"], "uma").removeprefix("http://testserver"))

    assert answer.status_code == 400 and b"is not one this tenant accepts" in answer.content
    assert idp_step_up.take(client.session, proposal.id, proposal.action_digest) is None


def pending(user, proposal, **changes):
    return {
        "purpose": "step_up",
        "proposal": str(proposal.id),
        "digest": proposal.action_digest,
        "user": user.pk,
        "started": int(time.time()),
        **changes,
    }


def claims(identity, proposal, **changes):
    return {
        "sub": identity.subject,
        "nonce": idp_step_up.bound_nonce(proposal.id, proposal.action_digest),
        "auth_time": int(time.time()),
        "acr": "urn:acme:mfa",
        "amr": ["pwd", "otp"],
        **changes,
    }


@pytest.mark.parametrize(
    "change, code",
    [
        ({"auth_time": int(time.time()) - 3600}, "not_fresh"),  # the provider did not re-authenticate
        ({"auth_time": None}, "not_fresh"),
        ({"acr": "urn:acme:password"}, "weak_acr"),
        ({"amr": ["pwd"]}, "weak_amr"),
        ({"nonce": "random.0000"}, "unbound_nonce"),
        ({"sub": "someone-else"}, "other_person"),
    ],
)
def test_each_weak_or_foreign_confirmation_is_refused(rf, idp_step_up_tenant, proposal, tenant, change, code):
    user = factories.make_user("vic", tenant=tenant, totp=False)
    identity = ExternalIdentity.objects.create(
        provider=idp_step_up_tenant, issuer=idp_step_up_tenant.issuer, subject="vic-sub", user=user
    )
    request = rf.get("/")
    request.session = {}

    with pytest.raises(SignInRefused) as refused:
        idp_step_up.complete(
            request, idp_step_up_tenant, claims(identity, proposal, **change), pending(user, proposal)
        )

    assert refused.value.code == code
    assert idp_step_up.SESSION_KEY not in request.session


def test_a_confirmation_for_another_version_of_the_proposal_does_not_count(
    rf, idp_step_up_tenant, proposal, tenant
):
    user = factories.make_user("wes", tenant=tenant, totp=False)
    identity = ExternalIdentity.objects.create(
        provider=idp_step_up_tenant, issuer=idp_step_up_tenant.issuer, subject="wes-sub", user=user
    )
    request = rf.get("/")
    request.session = {}
    idp_step_up.complete(request, idp_step_up_tenant, claims(identity, proposal), pending(user, proposal))

    assert idp_step_up.take(dict(request.session), proposal.id, "another-digest") is None
    assert idp_step_up.take(dict(request.session), proposal.id, proposal.action_digest) is not None
