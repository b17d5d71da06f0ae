"""Passkeys: a second device type beside the authenticator app, for sign-in and for each
vote; a policy may require one (`step_up: "passkey"`); the signed decision says which was used. Real
signatures from a software authenticator (tests/soft_authenticator.py) through the real checks."""

import uuid

import jwt
import pytest
from django.contrib.sessions.backends.db import SessionStore
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django_otp import DEVICE_ID_SESSION_KEY
from django_otp_webauthn.models import WebAuthnCredential

from accounts import devices, factors, passkeys, stepup
from accounts.devices import remove_passkey, rename_passkey, reset_devices
from accounts.models import PasskeyChallenge
from accounts.stepup import StepUp, step_up_for
from approvals.models import Decision, Vote
from approvals.policy.step_up import stricter_step_up, validate_step_up
from approvals.services.votes import cast_vote
from audit.models import AuditEvent, Verb
from lib.errors import Conflict, NotFound, ServiceError, VoteRefused
from tests import factories
from tests.approvals.test_consumers import _own_channel_prefix  # noqa: F401 (fixture)
from tests.concurrency import requires_postgres, run_together
from tests.factories import PASSWORD, submit, totp_code, trail_name
from tests.soft_authenticator import SoftAuthenticator, register_passkey

pytestmark = pytest.mark.django_db

# What Your devices' "Confirm it is you" gives someone who just used an established passkey.
BY_PASSKEY = factors.Confirmation(factors.PASSKEY, timezone.now())


@pytest.fixture
def passkey_policy(tenant):
    """Refunds need one finance approval confirmed with a passkey."""
    return factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        step_up="passkey",
        thresholds=[{"group": "finance", "count": 1}],
    )


def answer_for(authenticator, user, proposal, digest=None) -> dict:
    return authenticator.get(passkeys.vote_options(user, proposal.id, digest or proposal.action_digest))


def passkey_step_up(user, answer, proposal, session=None):
    return step_up_for(
        user, "", session, passkey=answer, proposal_id=proposal.id, digest=proposal.action_digest
    )


def cast(proposal, user, step_up):
    return cast_vote(
        proposal.id, user, verdict="approve", digest_seen=proposal.action_digest, step_up=step_up
    )


def refusal_code(proposal, user, step_up) -> str:
    with pytest.raises(VoteRefused) as refused:
        cast(proposal, user, step_up)
    return refused.value.code


def approvers_of(proposal) -> list[dict]:
    token = Decision.objects.get(proposal=proposal).token
    return jwt.decode(token, options={"verify_signature": False})["approvers"]


# ---------------------------------------------------------------------------------------------------
# The step-up rules


def test_a_passkey_satisfies_per_vote_and_the_decision_says_passkey(
    agent, refund_policy, requester, reviewer_a
):
    authenticator = register_passkey(reviewer_a)
    proposal = submit(agent)

    cast(
        proposal,
        reviewer_a,
        passkey_step_up(reviewer_a, answer_for(authenticator, reviewer_a, proposal), proposal),
    )

    assert Vote.objects.get(proposal=proposal).auth_method == "passkey"
    assert [a["auth"]["method"] for a in approvers_of(proposal)] == ["passkey"]


def test_a_passkey_policy_refuses_a_one_time_code_with_a_message_naming_the_passkey(
    agent, passkey_policy, requester, reviewer_a
):
    register_passkey(reviewer_a)
    proposal = submit(agent)

    with pytest.raises(VoteRefused) as refused:
        cast(proposal, reviewer_a, step_up_for(reviewer_a, totp_code(reviewer_a)))

    assert refused.value.code == "passkey_required"
    assert "needs your passkey" in refused.value.message
    assert not Vote.objects.filter(proposal=proposal).exists()
    assert AuditEvent.objects.filter(
        subject=f"proposal:{proposal.id}", verb=Verb.STEP_UP_FAILED, data__code="passkey_required"
    ).exists()


def test_a_passkey_policy_refuses_an_earlier_step_up_of_the_session(
    agent, passkey_policy, requester, reviewer_a
):
    session = SessionStore()
    stepup.mark_fresh(session)
    proposal = submit(agent)

    assert refusal_code(proposal, reviewer_a, step_up_for(reviewer_a, "", session)) == "passkey_required"
    assert refusal_code(proposal, reviewer_a, None) == "passkey_required"


def test_a_passkey_policy_accepts_the_passkey_and_signs_it_into_the_decision(
    agent, passkey_policy, requester, reviewer_a
):
    authenticator = register_passkey(reviewer_a)
    proposal = submit(agent)

    cast(
        proposal,
        reviewer_a,
        passkey_step_up(reviewer_a, answer_for(authenticator, reviewer_a, proposal), proposal),
    )

    assert approvers_of(proposal)[0]["auth"]["method"] == "passkey"


def test_a_replayed_passkey_answer_is_refused(agent, refund_policy, requester, reviewer_a):
    authenticator = register_passkey(reviewer_a)
    proposal = submit(agent)
    answer = answer_for(authenticator, reviewer_a, proposal)

    assert passkey_step_up(reviewer_a, answer, proposal).method == "passkey"  # first use, not voted
    replayed = passkey_step_up(reviewer_a, answer, proposal)

    assert replayed.refused
    assert refusal_code(proposal, reviewer_a, replayed) == "step_up_failed"
    assert not Vote.objects.filter(proposal=proposal).exists()


def test_an_answer_for_another_proposal_is_refused(agent, refund_policy, requester, reviewer_a):
    authenticator = register_passkey(reviewer_a)
    first = submit(agent, task_id="task-1")
    second = submit(agent, task_id="task-2", action=factories.refund_action(order_id="7"))
    answer = answer_for(authenticator, reviewer_a, first)

    assert passkey_step_up(reviewer_a, answer, second).refused
    assert not Vote.objects.filter(proposal=second).exists()


def test_the_services_refuse_a_passkey_step_up_bound_to_another_proposal_or_digest(
    agent, refund_policy, requester, reviewer_a
):
    proposal = submit(agent)
    elsewhere = StepUp("passkey", None, bound_to=(str(uuid.uuid4()), proposal.action_digest))
    old_digest = StepUp("passkey", None, bound_to=(str(proposal.id), "sha256:" + "0" * 64))

    assert refusal_code(proposal, reviewer_a, elsewhere) == "step_up_failed"
    assert refusal_code(proposal, reviewer_a, old_digest) == "step_up_failed"


def test_an_answer_for_another_digest_of_the_same_proposal_is_refused(
    agent, refund_policy, requester, reviewer_a
):
    authenticator = register_passkey(reviewer_a)
    proposal = submit(agent)
    answer = answer_for(authenticator, reviewer_a, proposal, digest="sha256:" + "0" * 64)

    assert passkey_step_up(reviewer_a, answer, proposal).refused


def test_someone_elses_passkey_does_not_answer_for_me(
    agent, refund_policy, requester, reviewer_a, reviewer_b
):
    authenticator_b = register_passkey(reviewer_b)
    proposal = submit(agent)
    # reviewer_b's key signs a challenge made for reviewer_a: the credential is not reviewer_a's.
    answer = authenticator_b.get(passkeys.vote_options(reviewer_a, proposal.id, proposal.action_digest))

    assert passkey_step_up(reviewer_a, answer, proposal).refused


def test_a_signature_counter_that_does_not_advance_is_refused(agent, refund_policy, requester, reviewer_a):
    authenticator = register_passkey(reviewer_a)
    proposal = submit(agent)
    assert (
        passkey_step_up(reviewer_a, answer_for(authenticator, reviewer_a, proposal), proposal).method
        == "passkey"
    )
    authenticator.sign_count -= 1  # a cloned key answers with a counter already seen

    assert passkey_step_up(reviewer_a, answer_for(authenticator, reviewer_a, proposal), proposal).refused


def test_an_expired_challenge_is_refused(agent, refund_policy, requester, reviewer_a):
    authenticator = register_passkey(reviewer_a)
    proposal = submit(agent)
    answer = answer_for(authenticator, reviewer_a, proposal)
    PasskeyChallenge.objects.update(created_at=factories.in_seconds(-passkeys.CHALLENGE_SECONDS - 1))

    assert passkey_step_up(reviewer_a, answer, proposal).refused


def test_a_passkey_vote_refreshes_the_session_for_a_window_policy(tenant, agent, requester, reviewer_a):
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund", step_up="300")
    authenticator = register_passkey(reviewer_a)
    session = SessionStore()
    proposal = submit(agent)

    passkey_step_up(reviewer_a, answer_for(authenticator, reviewer_a, proposal), proposal, session)

    assert stepup.fresh_within(session, 300)


# ---------------------------------------------------------------------------------------------------
# Policies accept step_up "passkey"


def test_validate_step_up_accepts_passkey_and_it_is_the_strictest():
    assert validate_step_up(" passkey ") == "passkey"
    assert stricter_step_up("passkey", "per_vote") == "passkey"
    assert stricter_step_up("300", "passkey") == "passkey"
    assert stricter_step_up("300", "per_vote") == "per_vote"
    with pytest.raises(ValueError, match="'passkey'"):
        validate_step_up("passkeys")


def test_a_policy_version_with_step_up_passkey_is_stored(passkey_policy):
    assert passkey_policy.step_up == "passkey"


# ---------------------------------------------------------------------------------------------------
# Devices: several, named, renamed and removed through the audited services


def test_a_person_registers_several_named_passkeys_and_each_is_audited(reviewer_a):
    register_passkey(reviewer_a, "work laptop")
    register_passkey(reviewer_a, "blue key")

    names = list(
        WebAuthnCredential.objects.filter(user=reviewer_a).order_by("id").values_list("name", flat=True)
    )
    assert names == ["work laptop", "blue key"]
    enrolled = AuditEvent.objects.filter(verb=Verb.DEVICE_ENROLLED, subject=trail_name("reviewer_a"))
    # By seq, then as written: in this test's transaction the events are not sealed yet (sequenced after
    # commit), so seq is NULL for both and PostgreSQL may return the tie in either order (a CI run did).
    assert [e.data["name"] for e in enrolled.order_by("seq", "pk")] == ["work laptop", "blue key"]


def test_a_registration_answer_is_usable_once(reviewer_a):
    authenticator = SoftAuthenticator()
    answer = authenticator.create(passkeys.registration_options(reviewer_a))
    devices.register_passkey(reviewer_a, answer=answer, name="laptop", confirmation=BY_PASSKEY)

    with pytest.raises(ServiceError) as refused:
        devices.register_passkey(reviewer_a, answer=answer, name="again", confirmation=BY_PASSKEY)
    assert refused.value.code == "passkey_refused"
    assert WebAuthnCredential.objects.filter(user=reviewer_a).count() == 1


def test_rename_and_remove_are_audited(reviewer_a):
    register_passkey(reviewer_a, "laptop")
    device = WebAuthnCredential.objects.get(user=reviewer_a)

    rename_passkey(reviewer_a, device.pk, name="old laptop")
    remove_passkey(reviewer_a, device.pk, confirmation=BY_PASSKEY)

    assert not WebAuthnCredential.objects.filter(user=reviewer_a).exists()
    renamed = AuditEvent.objects.get(verb=Verb.PERSON_CHANGED, subject=trail_name("reviewer_a"))
    assert renamed.data["before"] == "laptop" and renamed.data["name"] == "old laptop"
    removed = AuditEvent.objects.get(verb=Verb.DEVICE_RESET, subject=trail_name("reviewer_a"))
    assert removed.data["device"] == "passkey" and removed.data["name"] == "old laptop"


def test_a_person_cannot_remove_their_only_second_factor(tenant):
    person = factories.make_user("passkey_only", tenant=tenant, totp=False)
    register_passkey(person)
    device = WebAuthnCredential.objects.get(user=person)

    with pytest.raises(Conflict) as refused:
        remove_passkey(person, device.pk, confirmation=BY_PASSKEY)

    assert "only second factor" in refused.value.message
    assert WebAuthnCredential.objects.filter(pk=device.pk).exists()


def test_nobody_renames_or_removes_someone_elses_passkey(reviewer_a, reviewer_b):
    register_passkey(reviewer_a)
    device = WebAuthnCredential.objects.get(user=reviewer_a)

    with pytest.raises(NotFound):
        rename_passkey(reviewer_b, device.pk, name="mine now")
    with pytest.raises(NotFound):
        remove_passkey(reviewer_b, device.pk, confirmation=BY_PASSKEY)


def test_the_admin_device_reset_removes_passkeys_too(reviewer_a, admin_user):
    register_passkey(reviewer_a)
    admin_user.is_superuser = True

    removed = reset_devices(reviewer_a, actor=admin_user, reason="lost laptop")

    assert removed >= 1 and not WebAuthnCredential.objects.filter(user=reviewer_a).exists()


# ---------------------------------------------------------------------------------------------------
# Pages: Your devices, sign-in with a passkey, the vote form


def test_your_devices_lists_passkeys_and_needs_a_verified_session(client, reviewer_a):
    register_passkey(reviewer_a, "work laptop")
    url = reverse("accounts:devices")

    assert client.get(url).status_code == 302  # not signed in
    factories.sign_in_verified(client, reviewer_a)
    response = client.get(url)
    assert response.status_code == 200 and "work laptop" in response.content.decode()
    assert client.post(url).status_code == 405


def test_your_devices_renames_and_refuses_someone_elses_passkey(client, reviewer_a, reviewer_b):
    register_passkey(reviewer_b)
    other = WebAuthnCredential.objects.get(user=reviewer_b)
    factories.sign_in_verified(client, reviewer_a)

    response = client.post(reverse("accounts:passkey_rename", args=[other.pk]), {"name": "mine"})

    assert response.status_code == 404
    assert WebAuthnCredential.objects.get(pk=other.pk).name == "laptop"


def test_registration_through_the_page(client, reviewer_a):
    factories.sign_in_verified(client, reviewer_a)
    client.post(reverse("accounts:confirm"), {"otp_token": totp_code(reviewer_a)})  # no passkey yet
    authenticator = SoftAuthenticator()
    options = client.post(reverse("accounts:passkey_registration_options")).json()

    response = client.post(
        reverse("accounts:passkey_register"),
        {"name": "phone", "passkey": __import__("json").dumps(authenticator.create(options))},
    )

    assert response.status_code == 302
    assert WebAuthnCredential.objects.get(user=reviewer_a).name == "phone"


def test_sign_in_with_password_and_passkey(reviewer_a):
    authenticator = register_passkey(reviewer_a)
    client = Client()
    options = client.post(reverse("accounts:passkey_sign_in_options")).json()
    assert options["allowCredentials"] == []  # nothing said about which accounts have passkeys

    response = client.post(
        reverse("login"),
        {
            "username": "reviewer_a",
            "password": PASSWORD,
            "passkey": __import__("json").dumps(authenticator.get(options)),
        },
    )

    assert response.status_code == 302
    device_id = client.session[DEVICE_ID_SESSION_KEY]
    assert device_id.startswith("django_otp_webauthn.webauthncredential/")


def test_sign_in_with_a_wrong_password_and_a_good_passkey_is_refused_like_any_other(reviewer_a):
    authenticator = register_passkey(reviewer_a)
    client = Client()
    options = client.post(reverse("accounts:passkey_sign_in_options")).json()

    response = client.post(
        reverse("login"),
        {
            "username": "reviewer_a",
            "password": "wrong",
            "passkey": __import__("json").dumps(authenticator.get(options)),
        },
    )

    assert response.status_code == 400
    assert DEVICE_ID_SESSION_KEY not in client.session


def test_the_vote_form_with_a_passkey_and_the_page_says_a_passkey_is_needed(
    client, agent, passkey_policy, requester, reviewer_a
):
    import json

    authenticator = register_passkey(reviewer_a)
    factories.sign_in_verified(client, reviewer_a)
    proposal = submit(agent)
    page = client.get(reverse("approvals:detail", args=[proposal.id])).content.decode()
    assert "This policy needs <strong>your passkey</strong>" in page and "data-passkey-required" in page

    refused = client.post(
        reverse("approvals:decide", args=[proposal.id]),
        {"action": "approve", "digest": proposal.action_digest, "otp_code": totp_code(reviewer_a)},
    )
    assert refused.status_code == 403 and "needs your passkey" in refused.content.decode()

    options = client.post(
        reverse("approvals:passkey_challenge", args=[proposal.id]), {"digest": proposal.action_digest}
    ).json()
    answer = json.dumps(authenticator.get(options))
    response = client.post(
        reverse("approvals:decide", args=[proposal.id]),
        {"action": "approve", "digest": proposal.action_digest, "passkey": answer},
    )

    assert response.status_code == 302
    assert approvers_of(proposal)[0]["auth"]["method"] == "passkey"
    assert answer not in refused.content.decode()


def test_the_vote_challenge_is_for_people_who_may_see_the_proposal(
    client, agent, refund_policy, requester, outsider
):
    register_passkey(outsider)
    factories.sign_in_verified(client, outsider)
    proposal = submit(agent)

    response = client.post(reverse("approvals:passkey_challenge", args=[proposal.id]), {"digest": "x"})

    assert response.status_code == 404
    assert not PasskeyChallenge.objects.filter(purpose="vote").exists()


def test_the_admin_names_second_factors_in_words(client):
    from django.contrib.auth import get_user_model

    root = get_user_model().objects.create_superuser("root", "root@example.test", "pw-for-tests")
    factories.sign_in_verified(client, root)

    index = client.get("/admin/").content.decode()

    assert "Authenticator apps" in index and "Passkeys" in index and "Backup codes" in index
    assert "TOTP devices" not in index


# ---------------------------------------------------------------------------------------------------
# The WebSocket vote carries the passkey answer too


@pytest.mark.django_db(transaction=True)
async def test_a_vote_over_the_socket_with_a_passkey_is_recorded(
    agent, passkey_policy, requester, reviewer_a
):
    from channels.db import database_sync_to_async

    from tests.approvals.test_consumers import connected, proposal_path, reply_to, sign_in, vote

    authenticator = await database_sync_to_async(register_passkey)(reviewer_a)
    proposal = await database_sync_to_async(submit)(agent)
    communicator = await connected(proposal_path(proposal), await database_sync_to_async(sign_in)(reviewer_a))
    answer = await database_sync_to_async(answer_for)(authenticator, reviewer_a, proposal)

    code = await database_sync_to_async(totp_code)(reviewer_a)
    refused = await reply_to(communicator, vote(proposal, otp_code=code))
    recorded = await reply_to(communicator, vote(proposal, passkey=answer))
    await communicator.disconnect()

    assert refused["error"]["code"] == "passkey_required"
    assert recorded["type"] == "vote.recorded"
    assert await database_sync_to_async(lambda: approvers_of(proposal)[0]["auth"]["method"])() == "passkey"


def test_an_edit_under_a_passkey_policy_takes_the_passkey_and_refuses_a_code(
    client, agent, passkey_policy, requester, reviewer_a
):
    import json

    from approvals.models import Proposal
    from tests.approvals.test_views import edit_form

    authenticator = register_passkey(reviewer_a)
    factories.sign_in_verified(client, reviewer_a)
    proposal = submit(agent)
    url = reverse("approvals:edit", args=[proposal.id])
    assert "data-passkey-required" in client.get(url).content.decode()

    with_code = client.post(url, edit_form(proposal, amount="30.00", user=reviewer_a))
    assert with_code.status_code == 403 and "needs your passkey" in with_code.content.decode()

    options = client.post(
        reverse("approvals:passkey_challenge", args=[proposal.id]), {"digest": proposal.action_digest}
    ).json()
    form = {**edit_form(proposal, amount="30.00"), "passkey": json.dumps(authenticator.get(options))}
    response = client.post(url, form)

    assert response.status_code == 302
    assert Proposal.objects.get(supersedes=proposal).action["arguments"]["amount"] == "30.00"


def test_asking_for_a_sign_in_challenge_stores_nothing_and_its_answer_works_once(reviewer_a):
    authenticator = register_passkey(reviewer_a)
    before = PasskeyChallenge.objects.count()
    options = Client().post(reverse("accounts:passkey_sign_in_options")).json()
    assert PasskeyChallenge.objects.count() == before
    answer = authenticator.get(options)

    assert passkeys.verify_sign_in(reviewer_a, answer) is not None
    assert passkeys.verify_sign_in(reviewer_a, answer) is None  # replayed
    forged = authenticator.get({**options, "challenge": options["challenge"][:-4] + "AAAA"})
    assert passkeys.verify_sign_in(reviewer_a, forged) is None  # not a challenge we signed


@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_one_passkey_answer_sent_ten_times_at_once_counts_once(agent, refund_policy, requester, reviewer_a):
    authenticator = register_passkey(reviewer_a)
    proposal = submit(agent)
    answer = answer_for(authenticator, reviewer_a, proposal)

    results = run_together(*[lambda: passkey_step_up(reviewer_a, answer, proposal)] * 10)

    assert sorted(result.method for result in results) == [""] * 9 + ["passkey"]
