"""Changing one's factors with a fresh, strong enough confirmation: each change is made, audited and
e-mailed; the confirmation is short, bound to its session and of a strength; a new passkey's cool-off
ends with time or an admin's vouch; the admin's reset and vouch are audited and e-mailed. The attacks are
in test_factor_attacks.py."""

import json

import pytest
from django.contrib.sessions.backends.db import SessionStore
from django.core import mail, signing
from django.urls import reverse
from django.utils import timezone
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice
from django_otp_webauthn.models import WebAuthnCredential

from accounts import devices, factors, passkeys
from accounts.models import PasskeyVouch
from approvals.models import Vote
from approvals.services.votes import cast_vote
from audit.models import AuditEvent, Verb
from lib.errors import Conflict, DeviceResetRefused, FactorChangeRefused, VoteRefused
from tests import factories
from tests.factories import submit, totp_code, trail_name
from tests.soft_authenticator import SoftAuthenticator, register_passkey

pytestmark = pytest.mark.django_db


def events(user, verb) -> list[dict]:
    return list(
        AuditEvent.objects.filter(subject=trail_name(user.get_username()), verb=verb)
        .order_by("seq")
        .values_list("data", flat=True)
    )


def confirm_with_passkey(client, authenticator):
    options = client.post(reverse("accounts:passkey_confirm_options")).json()
    return client.post(reverse("accounts:confirm"), {"passkey": json.dumps(authenticator.get(options))})


def add_passkey(client, name="phone"):
    authenticator = SoftAuthenticator()
    options = client.post(reverse("accounts:passkey_registration_options")).json()
    response = client.post(
        reverse("accounts:passkey_register"),
        {"name": name, "passkey": json.dumps(authenticator.create(options))},
    )
    return authenticator, response


# ---------------------------------------------------------------------------------------------------
# The rules: which factor a change needs


def test_the_factor_a_change_needs_is_the_strongest_the_person_has(tenant, reviewer_a):
    nobody = factories.make_user("new_person", tenant=tenant, totp=False)
    assert factors.needed_for_change(nobody) is None  # the first enrollment needs the password only
    StaticToken.objects.create(
        device=StaticDevice.objects.create(user=nobody, name="b", confirmed=True), token="12345678"
    )
    assert factors.needed_for_change(nobody) == factors.BACKUP_CODE
    assert factors.needed_for_change(reviewer_a) == factors.TOTP
    register_passkey(reviewer_a, established=False)
    assert factors.needed_for_change(reviewer_a) == factors.TOTP  # a new passkey counts as a code
    register_passkey(reviewer_a)
    assert factors.needed_for_change(reviewer_a) == factors.PASSKEY
    only_new_passkey = factories.make_user("passkey_only", tenant=tenant, totp=False)
    register_passkey(only_new_passkey, established=False)
    assert factors.needed_for_change(only_new_passkey) == factors.NEW_PASSKEY
    assert (factors.refusal(only_new_passkey, None, "adding a passkey") or "").startswith(
        "Adding a passkey needs you to confirm with one of your passkeys first"
    )


def test_the_services_refuse_a_weaker_confirmation_and_record_it(reviewer_a):
    register_passkey(reviewer_a)
    by_code = factors.Confirmation(factors.TOTP, timezone.now())

    with pytest.raises(FactorChangeRefused) as refused:
        devices.generate_backup_codes(reviewer_a, confirmation=by_code)

    assert refused.value.code == "confirm_first" and refused.value.http_status == 403
    assert "confirm with one of your passkeys" in refused.value.message
    assert events(reviewer_a, Verb.DEVICE_CHANGE_REFUSED) == [
        {"change": "making new backup codes", "needed": "passkey", "confirmed_with": "totp"}
    ]
    assert not StaticDevice.objects.filter(user=reviewer_a).exists()


# ---------------------------------------------------------------------------------------------------
# The confirmation


def test_a_confirmation_is_kept_for_its_window_in_its_own_session_only(client, reviewer_a, settings):
    factories.sign_in_verified(client, reviewer_a)

    response = client.post(reverse("accounts:confirm"), {"otp_token": totp_code(reviewer_a)})

    assert response.status_code == 302
    session = client.session
    confirmation = factors.confirmation_in(session)
    assert confirmation is not None and confirmation.method == factors.TOTP
    elsewhere = SessionStore()
    elsewhere.create()
    elsewhere[factors.SESSION_KEY] = session[factors.SESSION_KEY]  # copied into another session
    assert factors.confirmation_in(elsewhere) is None
    session[factors.SESSION_KEY] = session[factors.SESSION_KEY].replace(":totp", ":passkey")
    assert factors.confirmation_in(session) is None  # a forged strength breaks the signature


def test_a_confirmation_older_than_its_window_no_longer_counts(client, reviewer_a, settings, monkeypatch):
    factories.sign_in_verified(client, reviewer_a)
    client.post(reverse("accounts:confirm"), {"otp_token": totp_code(reviewer_a)})
    session = client.session
    # django.core.signing's own `time` module, whose clock dates a signature (not in django-stubs).
    later = signing.time.time() + settings.FACTOR_CHANGE_WINDOW_SECONDS + 1  # type: ignore[attr-defined]
    monkeypatch.setattr(signing.time, "time", lambda: later)  # type: ignore[attr-defined]  # a fake clock for the signature's age

    assert factors.confirmation_in(session) is None


def test_a_wrong_or_used_code_does_not_confirm(client, reviewer_a):
    factories.sign_in_verified(client, reviewer_a)
    code = totp_code(reviewer_a)
    assert client.post(reverse("accounts:confirm"), {"otp_token": code}).status_code == 302
    other = factories.verified_client(reviewer_a)

    used = other.post(reverse("accounts:confirm"), {"otp_token": code})
    empty = other.post(reverse("accounts:confirm"), {})

    assert used.status_code == 400 and "not valid (or was already used)" in used.content.decode()
    assert empty.status_code == 400
    assert "type a code, or press Confirm with a passkey" in empty.content.decode()
    assert factors.confirmation_in(other.session) is None


def test_the_devices_page_says_which_factor_is_needed_and_why(client, reviewer_a):
    factories.sign_in_verified(client, reviewer_a)
    page = client.get(reverse("accounts:devices")).content.decode()
    assert "confirm with <strong>a code from your authenticator app</strong> first" in page
    assert "being signed in is not enough" in page

    register_passkey(reviewer_a)
    page = client.get(reverse("accounts:devices")).content.decode()
    assert "confirm with <strong>one of your passkeys</strong> first" in page
    assert "Confirm with a passkey" in page and 'name="otp_token"' not in page


def test_the_confirm_views_need_a_verified_session_and_post(client, reviewer_a):
    assert client.post(reverse("accounts:confirm"), {"otp_token": "123456"}).status_code == 302
    assert client.post(reverse("accounts:passkey_confirm_options")).status_code == 302
    factories.sign_in_verified(client, reviewer_a)
    assert client.get(reverse("accounts:confirm")).status_code == 405
    assert client.post(reverse("accounts:passkey_confirm_options")).status_code == 409  # no passkey yet


# ---------------------------------------------------------------------------------------------------
# Each change with the right confirmation: made, audited, e-mailed


def test_a_passkey_confirms_adding_another_passkey(client, reviewer_a, django_capture_on_commit_callbacks):
    own = register_passkey(reviewer_a, "laptop")
    factories.sign_in_verified(client, reviewer_a)
    assert confirm_with_passkey(client, own).status_code == 302

    with django_capture_on_commit_callbacks(execute=True):
        _, response = add_passkey(client, "phone")

    assert response.status_code == 302
    added = WebAuthnCredential.objects.get(user=reviewer_a, name="phone")
    assert passkeys.cool_off_until(added) is not None
    [enrolled] = [e for e in events(reviewer_a, Verb.DEVICE_ENROLLED) if e.get("name") == "phone"]
    assert enrolled["confirmed_with"] == "passkey" and enrolled["cool_off_until"]
    [message] = mail.outbox
    assert message.to == ["reviewer_a@example.test"]
    assert "A passkey “phone” was added" in message.subject
    assert "does not confirm decisions that need a passkey until" in message.body
    assert "ask a tenant admin now to reset your devices" in message.body


def test_a_code_confirms_the_first_passkey_of_someone_with_an_authenticator_app(client, reviewer_a):
    factories.sign_in_verified(client, reviewer_a)
    client.post(reverse("accounts:confirm"), {"otp_token": totp_code(reviewer_a)})

    _, response = add_passkey(client)

    assert response.status_code == 302
    assert WebAuthnCredential.objects.filter(user=reviewer_a).count() == 1


def test_new_backup_codes_replace_the_old_ones(client, reviewer_a, django_capture_on_commit_callbacks):
    StaticToken.objects.create(
        device=StaticDevice.objects.create(user=reviewer_a, name="b", confirmed=True), token="old12345"
    )
    factories.sign_in_verified(client, reviewer_a)
    client.post(reverse("accounts:confirm"), {"otp_token": totp_code(reviewer_a)})

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("accounts:backup_codes"))

    assert response.status_code == 200
    codes = response.context["backup_codes"]
    assert len(codes) == devices.BACKUP_CODE_COUNT
    assert set(StaticToken.objects.values_list("token", flat=True)) == set(codes)
    assert "only time they are shown" in response.content.decode()
    assert events(reviewer_a, Verb.DEVICE_ENROLLED)[-1]["device"] == "backup_codes"
    assert "New backup codes were made" in mail.outbox[0].subject


def test_a_new_authenticator_app_replaces_the_old_one(
    client, reviewer_a, django_capture_on_commit_callbacks, settings
):
    settings.OTP_TOTP_THROTTLE_FACTOR = 0  # the wrong code below would otherwise hold the right one back
    old = TOTPDevice.objects.get(user=reviewer_a)
    factories.sign_in_verified(client, reviewer_a)
    client.post(reverse("accounts:confirm"), {"otp_token": totp_code(reviewer_a)})
    page = client.get(reverse("accounts:authenticator"))
    assert page.status_code == 200 and "Set up a new authenticator app" in page.content.decode()
    new = TOTPDevice.objects.get(user=reviewer_a, confirmed=False)

    wrong = client.post(reverse("accounts:authenticator"), {"otp_token": "000000"})
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("accounts:authenticator"), {"otp_token": factories.code_of(new)})

    assert wrong.status_code == 400
    assert response.status_code == 302
    assert list(TOTPDevice.objects.filter(user=reviewer_a).values_list("pk", "confirmed")) == [(new.pk, True)]
    assert not TOTPDevice.objects.filter(pk=old.pk).exists()
    assert events(reviewer_a, Verb.DEVICE_ENROLLED)[-1] == {
        "device": "totp",
        "replaced": 1,
        "confirmed_with": "totp",
    }
    assert "A new authenticator app was set up" in mail.outbox[0].subject


def test_the_authenticator_service_refuses_without_a_confirmation(reviewer_a):
    devices.start_totp_enrollment(reviewer_a)

    with pytest.raises(FactorChangeRefused):
        devices.add_authenticator(reviewer_a, code="123456", confirmation=None)

    assert TOTPDevice.objects.filter(user=reviewer_a, confirmed=True).count() == 1


def test_removing_a_passkey_with_a_passkey_is_audited_and_e_mailed(
    client, reviewer_a, django_capture_on_commit_callbacks
):
    own = register_passkey(reviewer_a, "laptop")
    register_passkey(reviewer_a, "old key")
    old_key = WebAuthnCredential.objects.get(user=reviewer_a, name="old key")
    factories.sign_in_verified(client, reviewer_a)
    confirm_with_passkey(client, own)

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("accounts:passkey_remove", args=[old_key.pk]))

    assert response.status_code == 302
    assert not WebAuthnCredential.objects.filter(pk=old_key.pk).exists()
    assert events(reviewer_a, Verb.DEVICE_RESET)[-1]["confirmed_with"] == "passkey"
    assert "The passkey “old key” was removed" in mail.outbox[0].subject


def test_the_first_enrollment_service_refuses_someone_who_has_a_factor(reviewer_a):
    devices.start_totp_enrollment(reviewer_a)

    with pytest.raises(Conflict) as refused:
        devices.confirm_totp_enrollment(reviewer_a, code="123456")

    assert refused.value.code == "already_enrolled"


def test_a_device_name_reaches_the_mail_without_control_characters(
    reviewer_a, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        register_passkey(reviewer_a, "key\u202eyek\u200b")

    assert "\u202e" not in mail.outbox[0].subject and "\u200b" not in mail.outbox[0].body
    assert "keyyek" in mail.outbox[0].subject


# ---------------------------------------------------------------------------------------------------
# The cool-off and the admin's vouch


@pytest.fixture
def passkey_policy(tenant):
    return factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        step_up="passkey",
        thresholds=[{"group": "finance", "count": 1}],
    )


def passkey_vote(user, authenticator, proposal):
    from accounts.stepup import step_up_for

    answer = authenticator.get(passkeys.vote_options(user, proposal.id, proposal.action_digest))
    step_up = step_up_for(user, "", passkey=answer, proposal_id=proposal.id, digest=proposal.action_digest)
    return cast_vote(
        proposal.id, user, verdict="approve", digest_seen=proposal.action_digest, step_up=step_up
    )


def test_a_new_passkey_confirms_a_per_vote_policy_like_a_code(agent, refund_policy, requester, reviewer_a):
    authenticator = register_passkey(reviewer_a, established=False)

    vote = passkey_vote(reviewer_a, authenticator, submit(agent))

    assert vote.auth_method == "passkey"


def test_a_new_passkey_passes_a_passkey_policy_once_its_cool_off_ended(
    agent, passkey_policy, requester, reviewer_a
):
    authenticator = register_passkey(reviewer_a, established=False)
    proposal = submit(agent)
    with pytest.raises(VoteRefused) as refused:
        passkey_vote(reviewer_a, authenticator, proposal)
    assert refused.value.code == "passkey_cooling_off"

    WebAuthnCredential.objects.filter(user=reviewer_a).update(created_at=factories.in_seconds(-24 * 3600 - 1))

    assert passkey_vote(reviewer_a, authenticator, proposal).auth_method == "passkey"


def test_with_no_cool_off_a_new_passkey_counts_at_once(
    agent, passkey_policy, requester, reviewer_a, settings
):
    settings.PASSKEY_COOL_OFF_SECONDS = 0
    authenticator = register_passkey(reviewer_a, established=False)

    assert passkey_vote(reviewer_a, authenticator, submit(agent)).auth_method == "passkey"


def test_an_admin_vouches_for_new_passkeys_audited_and_e_mailed(
    reviewer_a, admin_user, django_capture_on_commit_callbacks
):
    register_passkey(reviewer_a, "laptop")  # established: nothing to vouch for
    register_passkey(reviewer_a, "phone", established=False)

    with django_capture_on_commit_callbacks(execute=True):
        vouched = devices.vouch_for_new_passkeys(reviewer_a, actor=admin_user, reason="she called")

    assert vouched == 1
    phone = WebAuthnCredential.objects.get(user=reviewer_a, name="phone")
    assert passkeys.cool_off_until(phone) is None
    assert PasskeyVouch.objects.get(passkey=phone).vouched_by == admin_user
    [event] = AuditEvent.objects.filter(verb=Verb.PASSKEY_VOUCHED)
    assert event.actor == trail_name("admin") and event.data == {
        "passkey": phone.pk,
        "name": "phone",
        "reason": "she called",
    }
    assert "An admin vouched for your new passkey(s) “phone”" in mail.outbox[0].subject
    assert "by admin (an admin)" in mail.outbox[0].body
    assert devices.vouch_for_new_passkeys(reviewer_a, actor=admin_user) == 0  # nothing left to vouch


def test_nobody_vouches_for_their_own_passkey_and_only_their_admins_do(
    tenant, other_tenant, reviewer_a, reviewer_b, admin_user
):
    register_passkey(admin_user, established=False)
    register_passkey(reviewer_a, established=False)
    stranger = factories.make_user("globex_admin", tenant=other_tenant, role="admin")

    for actor, person in ((admin_user, admin_user), (reviewer_b, reviewer_a), (stranger, reviewer_a)):
        with pytest.raises(DeviceResetRefused) as refused:
            devices.vouch_for_new_passkeys(person, actor=actor)
        assert refused.value.code == "not_allowed"

    assert not PasskeyVouch.objects.exists()
    assert not AuditEvent.objects.filter(verb=Verb.PASSKEY_VOUCHED).exists()


def test_the_admin_people_list_vouches_for_new_passkeys(client, reviewer_a):
    from django.contrib.auth import get_user_model

    register_passkey(reviewer_a, established=False)
    root = get_user_model().objects.create_superuser("root", "root@example.test", "pw-for-tests")
    factories.sign_in_verified(client, root)

    response = client.post(
        "/admin/auth/user/",
        {"action": "vouch_for_passkeys", "_selected_action": [reviewer_a.pk]},
        follow=True,
    )

    assert "1 new passkey(s) vouched for" in response.content.decode()
    assert PasskeyVouch.objects.filter(passkey__user=reviewer_a, vouched_by=root).exists()


def test_the_admin_device_reset_e_mails_the_person(
    reviewer_a, admin_user, django_capture_on_commit_callbacks
):
    register_passkey(reviewer_a)

    with django_capture_on_commit_callbacks(execute=True):
        devices.reset_devices(reviewer_a, actor=admin_user, reason="lost phone")

    assert factors.needed_for_change(reviewer_a) is None  # they enroll again with the password
    assert "Your second factors were reset" in mail.outbox[0].subject
    assert "by admin (an admin)" in mail.outbox[0].body


def test_no_vote_is_left_when_the_cool_off_refuses(agent, passkey_policy, requester, reviewer_a):
    authenticator = register_passkey(reviewer_a, established=False)
    proposal = submit(agent)

    with pytest.raises(VoteRefused) as refused:
        passkey_vote(reviewer_a, authenticator, proposal)

    assert "ask a tenant admin to vouch for this one" in refused.value.message
    assert not Vote.objects.filter(proposal=proposal).exists()


def test_a_person_whose_only_passkey_is_new_cannot_fill_a_passkey_quorum_until_vouched(
    reviewer_a, reviewer_b, admin_user
):
    from approvals.selectors.reach import factor_owners

    register_passkey(reviewer_a, established=False)
    register_passkey(reviewer_b)
    people = {reviewer_a.pk, reviewer_b.pk}

    assert factor_owners(people, needs_passkey=True) == {reviewer_b.pk}
    assert factor_owners(people, needs_passkey=False) == people  # a new passkey counts like a code
    devices.vouch_for_new_passkeys(reviewer_a, actor=admin_user)
    assert factor_owners(people, needs_passkey=True) == people
