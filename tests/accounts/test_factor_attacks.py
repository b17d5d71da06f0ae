"""The phished-password attack on a person's factors: someone who has the password and one code (or one
backup code), and so a signed-in session, tries to add their own passkey, authenticator app or backup
codes, or to remove the person's passkey, and then to release a passkey-only decision with a passkey
they added. Each is refused; the person's own fresh, strong factor is accepted. Real signatures
(tests/soft_authenticator.py), the real login view, the real vote form and the real socket.

These tests name the new endpoints by path, not by URL name, and import the new services only where the
attack has already been refused, so that on the code before the fix they run and fail on the attack's
success rather than on a missing name.
"""

import json

import pytest
from django.test import Client
from django.urls import reverse
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp_webauthn.models import WebAuthnCredential

from accounts import passkeys
from approvals.models import Vote
from audit.models import AuditEvent
from tests import factories
from tests.approvals.test_consumers import _own_channel_prefix  # noqa: F401 (fixture)
from tests.factories import PASSWORD, submit, totp_code, trail_name
from tests.soft_authenticator import SoftAuthenticator, register_passkey

pytestmark = pytest.mark.django_db

CONFIRM = "/accounts/devices/confirm"
BACKUP_CODES = "/accounts/devices/backup-codes"
AUTHENTICATOR = "/accounts/devices/authenticator"


@pytest.fixture
def passkey_policy(tenant):
    return factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        step_up="passkey",
        thresholds=[{"group": "finance", "count": 1}],
    )


def give_backup_codes(user, *codes) -> None:
    device = StaticDevice.objects.create(user=user, name="backup codes", confirmed=True)
    for code in codes:
        StaticToken.objects.create(device=device, token=code)


def phished_session(user, code: str) -> Client:
    """The attacker's browser: signed in through the login form with the password and one code."""
    client = Client()
    response = client.post(
        reverse("login"), {"username": user.get_username(), "password": PASSWORD, "otp_token": code}
    )
    assert response.status_code == 302, "the phished password and code sign in"
    return client


def add_passkey_through_the_page(client, user, name="attacker's key"):
    """Ask for registration options and send the new key's answer, as the page's script does. When the
    page refuses the options, answer a challenge made for the person anyway (as if one had leaked): the
    store itself must refuse it too."""
    authenticator = SoftAuthenticator()
    options_response = client.post(reverse("accounts:passkey_registration_options"))
    options = (
        options_response.json()
        if options_response.status_code == 200
        else passkeys.registration_options(user)
    )
    response = client.post(
        reverse("accounts:passkey_register"),
        {"name": name, "passkey": json.dumps(authenticator.create(options))},
    )
    return authenticator, options_response, response


def refusals(user) -> list[dict]:
    return list(
        AuditEvent.objects.filter(subject=trail_name(user.get_username()), verb="device.change_refused")
        .order_by("seq")
        .values_list("data", flat=True)
    )


# ---------------------------------------------------------------------------------------------------
# Adding, replacing and removing factors


def test_a_phished_password_and_code_cannot_add_a_passkey(reviewer_a):
    attacker = phished_session(reviewer_a, totp_code(reviewer_a))

    _, options, stored = add_passkey_through_the_page(attacker, reviewer_a)

    assert options.status_code == 403
    assert options.json()["error"]["code"] == "confirm_first"
    assert "a code from your authenticator app" in options.json()["error"]["message"]
    assert stored.status_code == 403
    assert "being signed in is not enough" in stored.content.decode()
    assert not WebAuthnCredential.objects.filter(user=reviewer_a).exists()
    assert [r["change"] for r in refusals(reviewer_a)] == ["adding a passkey"]


def test_a_phished_password_and_backup_codes_cannot_add_a_passkey(reviewer_a):
    give_backup_codes(reviewer_a, "11111111", "22222222")
    attacker = phished_session(reviewer_a, "11111111")
    # A second backup code is weaker than the authenticator app the person has.
    attacker.post(CONFIRM, {"otp_token": "22222222"})

    _, options, stored = add_passkey_through_the_page(attacker, reviewer_a)

    assert options.status_code == 403 and stored.status_code == 403
    assert "you confirmed with one of your backup codes, which is weaker" in stored.content.decode()
    assert not WebAuthnCredential.objects.filter(user=reviewer_a).exists()


def test_a_second_phished_code_cannot_add_a_passkey_for_someone_who_has_one(reviewer_a):
    register_passkey(reviewer_a, "own laptop")
    attacker = phished_session(reviewer_a, totp_code(reviewer_a))
    attacker.post(CONFIRM, {"otp_token": totp_code(reviewer_a)})

    _, options, stored = add_passkey_through_the_page(attacker, reviewer_a)

    assert options.status_code == 403 and stored.status_code == 403
    page = stored.content.decode()
    assert "confirm with one of your passkeys" in page and "you have a passkey" in page
    assert list(WebAuthnCredential.objects.filter(user=reviewer_a).values_list("name", flat=True)) == [
        "own laptop"
    ]


def test_a_phished_session_cannot_remove_the_persons_passkey(reviewer_a):
    register_passkey(reviewer_a, "own laptop")
    own = WebAuthnCredential.objects.get(user=reviewer_a)
    attacker = phished_session(reviewer_a, totp_code(reviewer_a))
    attacker.post(CONFIRM, {"otp_token": totp_code(reviewer_a)})

    response = attacker.post(reverse("accounts:passkey_remove", args=[own.pk]))

    assert response.status_code == 403
    assert "Removing a passkey needs you to confirm with one of your passkeys" in response.content.decode()
    assert WebAuthnCredential.objects.filter(pk=own.pk).exists()


def test_a_phished_session_cannot_make_new_backup_codes_or_set_up_its_own_app(reviewer_a):
    give_backup_codes(reviewer_a, "11111111")
    before = set(StaticToken.objects.values_list("token", flat=True))
    attacker = phished_session(reviewer_a, totp_code(reviewer_a))

    codes = attacker.post(BACKUP_CODES)
    app = attacker.get(AUTHENTICATOR)
    enroll = attacker.get(reverse("approvals:enroll"))

    assert codes.status_code == 302 and app.status_code == 302
    assert set(StaticToken.objects.values_list("token", flat=True)) == before
    assert reviewer_a.totpdevice_set.count() == 1  # no second, unconfirmed app was even started
    assert "already sign in with a second factor" in enroll.content.decode()
    assert [r["change"] for r in refusals(reviewer_a)] == ["making new backup codes"]


# ---------------------------------------------------------------------------------------------------
# A passkey added with codes does not release a passkey-only decision during its cool-off


def attacker_with_own_passkey(person) -> tuple[Client, SoftAuthenticator]:
    """The strongest form of the attack the rules allow: the person has only an authenticator app, and
    the attacker phished two codes (one to sign in, one to confirm) and added a passkey."""
    attacker = phished_session(person, totp_code(person))
    attacker.post(CONFIRM, {"otp_token": totp_code(person)})
    authenticator, options, stored = add_passkey_through_the_page(attacker, person)
    assert options.status_code == 200 and stored.status_code == 302
    return attacker, authenticator


def test_a_passkey_added_with_codes_does_not_pass_a_passkey_only_policy_on_the_form(
    agent, passkey_policy, requester, reviewer_a, admin_user
):
    attacker, authenticator = attacker_with_own_passkey(reviewer_a)
    proposal = submit(agent)

    def vote_with_the_passkey():
        options = attacker.post(
            reverse("approvals:passkey_challenge", args=[proposal.id]), {"digest": proposal.action_digest}
        ).json()
        return attacker.post(
            reverse("approvals:decide", args=[proposal.id]),
            {
                "action": "approve",
                "digest": proposal.action_digest,
                "passkey": json.dumps(authenticator.get(options)),
            },
        )

    refused = vote_with_the_passkey()

    assert refused.status_code == 403
    page = refused.content.decode()
    assert "needs a passkey you have had longer" in page and "vouch" in page
    assert not Vote.objects.filter(proposal=proposal).exists()
    assert AuditEvent.objects.filter(verb="step_up.failed", data__code="passkey_cooling_off").exists()

    from accounts.devices import vouch_for_new_passkeys

    assert vouch_for_new_passkeys(reviewer_a, actor=admin_user, reason="called her back") == 1

    assert vote_with_the_passkey().status_code == 302
    assert Vote.objects.get(proposal=proposal).auth_method == "passkey"


@pytest.mark.django_db(transaction=True)
async def test_a_passkey_added_with_codes_does_not_pass_a_passkey_only_policy_on_the_socket(
    agent, passkey_policy, requester, reviewer_a, admin_user
):
    from channels.db import database_sync_to_async

    from tests.approvals.test_consumers import connected, proposal_path, reply_to, vote

    attacker, authenticator = await database_sync_to_async(attacker_with_own_passkey)(reviewer_a)
    proposal = await database_sync_to_async(submit)(agent)
    communicator = await connected(proposal_path(proposal), attacker.cookies["sessionid"].value)

    def answer():
        options = passkeys.vote_options(reviewer_a, proposal.id, proposal.action_digest)
        return authenticator.get(options)

    refused = await reply_to(communicator, vote(proposal, passkey=await database_sync_to_async(answer)()))

    assert refused["type"] == "error"
    assert refused["error"]["code"] == "passkey_cooling_off"
    assert "needs a passkey you have had longer" in refused["error"]["message"]
    assert not await database_sync_to_async(Vote.objects.filter(proposal=proposal).exists)()

    from accounts.devices import vouch_for_new_passkeys

    await database_sync_to_async(vouch_for_new_passkeys)(reviewer_a, actor=admin_user)
    recorded = await reply_to(communicator, vote(proposal, passkey=await database_sync_to_async(answer)()))
    await communicator.disconnect()

    assert recorded["type"] == "vote.recorded"
