"""Passkeys (WebAuthn): a second factor beside the authenticator app, for sign-in and for each vote.

The credential is django-otp-webauthn's WebAuthnCredential, a django-otp Device (so `is_verified()`, the
sign-in session, the admin's device reset and `devices_for_user` treat it like any other); its helper
builds the registration options and checks a registration. Reviewer mounts none of that package's views:
the ceremonies below are ours, because a vote's challenge is bound to one proposal and one action digest.

Every ceremony starts with a challenge the server makes and stores (PasskeyChallenge; a sign-in's,
which anyone may ask for, is signed instead and stored only when used) and ends with the browser's
answer as JSON (static/js/passkeys.js), checked here once: the challenge row is taken by compare-and-set
(a sign-in's inserted) before the signature is checked, so a replayed answer finds it used; the credential row
is locked while its signature counter is checked and advanced. A vote's challenge is 16 random bytes
followed by sha256("reviewer.vote", proposal id, action digest), so what the authenticator signed names
the proposal and digest itself, and the row must match the vote it comes with.

User verification (PIN or biometric) is required: a passkey vote says the person was there, not only
their device. Passkeys must be discoverable, so that sign-in asks for "a passkey of this site" without
revealing which accounts have one; the password typed in the same form says whose passkey it must be.
"""

import hashlib
import json
import secrets
from datetime import timedelta

from django.conf import settings
from django.core import signing
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from django_otp_webauthn.helpers import WebAuthnHelper
from django_otp_webauthn.models import WebAuthnCredential
from webauthn import generate_authentication_options, options_to_json, verify_authentication_response
from webauthn.helpers import parse_authentication_credential_json
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import (
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from accounts.models import PasskeyChallenge, PasskeyVouch
from lib import base64url

CHALLENGE_SECONDS = 300
MAX_ANSWER_CHARS = 16_000  # a browser's answer is a few KB; anything longer is refused unread
_VOTE_CONTEXT = b"reviewer.vote\x00"
_SIGN_IN_SALT = "reviewer.passkey.sign_in"

Purpose = PasskeyChallenge.Purpose


class PasskeyRefused(Exception):
    """A registration the server cannot accept; the message is for the person."""


def rp_id() -> str:
    return settings.WEBAUTHN_RP_ID


def origins() -> list[str]:
    return list(settings.WEBAUTHN_ORIGINS)


class _Helper(WebAuthnHelper):
    """django-otp-webauthn's registration, with a discoverable credential and user verification, for
    the relying party of our settings."""

    def get_relying_party_domain(self) -> str:
        return rp_id()

    def get_allowed_origins(self) -> list[str]:
        return origins()

    def get_discoverable_credentials_preference(self) -> ResidentKeyRequirement:
        return ResidentKeyRequirement.REQUIRED

    def get_generate_registration_options_kwargs(self, *, user) -> dict:
        kwargs = super().get_generate_registration_options_kwargs(user=user)
        kwargs["authenticator_selection"].user_verification = UserVerificationRequirement.REQUIRED
        return kwargs


def _vote_binding(proposal_id, digest: str) -> bytes:
    return hashlib.sha256(_VOTE_CONTEXT + str(proposal_id).encode() + b"\x00" + digest.encode()).digest()


def _store(challenge: bytes, purpose: str, **fields) -> str:
    stale = timezone.now() - timedelta(seconds=2 * CHALLENGE_SECONDS)
    PasskeyChallenge.objects.filter(created_at__lt=stale).delete()  # housekeeping: used or abandoned
    text = base64url.encode(challenge)
    PasskeyChallenge.objects.create(challenge=text, purpose=purpose, **fields)
    return text


def _request_options(challenge: bytes, allow: list[PublicKeyCredentialDescriptor]) -> dict:
    options = generate_authentication_options(
        rp_id=rp_id(),
        challenge=challenge,
        timeout=CHALLENGE_SECONDS * 1000,
        allow_credentials=allow,
        user_verification=UserVerificationRequirement.REQUIRED,
    )
    return json.loads(options_to_json(options))


# --- Starting a ceremony: the options the browser passes to navigator.credentials ---------------------


def registration_options(user) -> dict:
    options, state = _Helper(request=None).register_begin(user)
    _store(base64url.decode(options["challenge"]), Purpose.REGISTER, user=user, state=state)
    return options


def sign_in_options() -> dict:
    """Any passkey of this site (discoverable): the server does not say whether an account has one.
    Anyone may ask, so nothing is stored: the challenge is a random nonce signed with its time, and it
    is recorded as used only when an answer comes with the right password (`verify_sign_in`)."""
    nonce = base64url.encode(secrets.token_bytes(16))
    challenge = signing.TimestampSigner(salt=_SIGN_IN_SALT).sign(nonce).encode()
    return _request_options(challenge, [])


def vote_options(user, proposal_id, digest: str) -> dict:
    """A challenge for one vote on `proposal_id` as shown with `digest`, for this person's passkeys."""
    challenge = secrets.token_bytes(16) + _vote_binding(proposal_id, digest)
    _store(challenge, Purpose.VOTE, user=user, proposal_id=proposal_id, action_digest=digest)
    allow = WebAuthnCredential.get_credential_descriptors_for_user(user)
    return _request_options(challenge, allow)


def confirm_options(user) -> dict:
    """A challenge for this person's passkeys, answered on Your devices before changing their factors."""
    challenge = secrets.token_bytes(32)
    _store(challenge, Purpose.CONFIRM, user=user)
    return _request_options(challenge, WebAuthnCredential.get_credential_descriptors_for_user(user))


def cool_off_until(device: WebAuthnCredential):
    """When this passkey's cool-off ends (PASSKEY_COOL_OFF_SECONDS after it was added), or None once it
    has ended or an admin vouched for it. Until then it is no stronger than the factor it was added with."""
    end = device.created_at + timedelta(seconds=settings.PASSKEY_COOL_OFF_SECONDS)
    if end <= timezone.now() or PasskeyVouch.objects.filter(passkey=device).exists():
        return None
    return end


def established_owners_among(user_ids) -> set:
    """Which of these people have a passkey past its cool-off or vouched for: what a passkey-only policy
    accepts (one query, for the reachability of a quorum)."""
    cutoff = timezone.now() - timedelta(seconds=settings.PASSKEY_COOL_OFF_SECONDS)
    return set(
        WebAuthnCredential.objects.filter(user_id__in=user_ids, confirmed=True)
        .filter(Q(created_at__lte=cutoff) | Q(vouch__isnull=False))
        .values_list("user_id", flat=True)
    )


def has_passkey(user) -> bool:
    return WebAuthnCredential.objects.filter(user=user, confirmed=True).exists()


def owners_among(user_ids) -> set:
    """Which of these people have a passkey (one query, for the socket fan-out)."""
    return set(
        WebAuthnCredential.objects.filter(user_id__in=user_ids, confirmed=True).values_list(
            "user_id", flat=True
        )
    )


# --- Finishing a ceremony: the browser's answer, checked once ------------------------------------------


def _parse(answer) -> dict | None:
    if isinstance(answer, str):
        if not answer.strip() or len(answer) > MAX_ANSWER_CHARS:
            return None
        try:
            answer = json.loads(answer)
        except ValueError:
            return None
    if not isinstance(answer, dict) or len(json.dumps(answer)) > MAX_ANSWER_CHARS:
        return None
    return answer


def _client_challenge(answer: dict) -> str | None:
    """The challenge the browser says it answered (its signature is checked later against the row)."""
    try:
        client_data = json.loads(base64url.decode(answer["response"]["clientDataJSON"]))
        challenge = client_data["challenge"]
    except (KeyError, TypeError, ValueError):
        return None
    return challenge if isinstance(challenge, str) else None


def _take(answer: dict, purpose: str, **binding) -> PasskeyChallenge | None:
    """The challenge row this answer is for, marked used now; None if unknown, expired, already used or
    bound to something else. A vote's step-up runs outside any transaction, so this commits at once and a
    refused answer still uses its challenge up."""
    text = _client_challenge(answer)
    if text is None:
        return None
    now = timezone.now()
    taken = PasskeyChallenge.objects.filter(
        challenge=text,
        purpose=purpose,
        used_at__isnull=True,
        created_at__gte=now - timedelta(seconds=CHALLENGE_SECONDS),
        **binding,
    ).update(used_at=now)
    return PasskeyChallenge.objects.get(challenge=text) if taken == 1 else None


def _verify_assertion(user, answer: dict, challenge: PasskeyChallenge) -> WebAuthnCredential | None:
    """Check the signature with the person's own passkey and advance its counter (row locked)."""
    try:
        credential = parse_authentication_credential_json(answer)
    except (WebAuthnException, KeyError, TypeError, ValueError):
        return None
    with transaction.atomic():
        device = (
            WebAuthnCredential.objects.select_for_update()
            .filter(
                user=user,
                confirmed=True,
                credential_id_sha256=WebAuthnCredential.get_credential_id_sha256(credential.raw_id),
            )
            .first()
        )
        if device is None:
            return None
        try:
            checked = verify_authentication_response(
                credential=credential,
                expected_challenge=base64url.decode(challenge.challenge),
                expected_rp_id=rp_id(),
                expected_origin=origins(),
                credential_public_key=bytes(device.public_key),
                credential_current_sign_count=device.sign_count,
                require_user_verification=True,
            )
        except WebAuthnException:  # bad signature, origin, rp id, counter gone backwards, no UV ...
            return None
        device.sign_count = checked.new_sign_count
        device.backup_state = checked.credential_backed_up
        device.set_last_used_timestamp(commit=False)
        device.save(update_fields=["sign_count", "backup_state", "last_used_at"])
    return device


def verify_sign_in(user, answer) -> WebAuthnCredential | None:
    """The passkey of `user` that answered a sign-in challenge, or None. Called only once the password
    was right; the challenge must carry our signature, be younger than CHALLENGE_SECONDS and not have
    been used (recording it is what uses it up: the unique challenge refuses a second row)."""
    answer = _parse(answer)
    text = _client_challenge(answer) if answer is not None else None
    if text is None:
        return None
    try:
        signed = base64url.decode(text).decode()
        signing.TimestampSigner(salt=_SIGN_IN_SALT).unsign(signed, max_age=CHALLENGE_SECONDS)
    except (signing.BadSignature, UnicodeDecodeError, ValueError):
        return None
    try:
        with transaction.atomic():
            challenge = PasskeyChallenge.objects.create(
                challenge=text, purpose=Purpose.SIGN_IN, used_at=timezone.now()
            )
    except IntegrityError:  # answered before: a replay
        return None
    return _verify_assertion(user, answer, challenge)


def verify_vote(user, answer, proposal_id, digest: str) -> WebAuthnCredential | None:
    """The passkey of `user` that answered the challenge made for this proposal and digest, or None."""
    answer = _parse(answer)
    if answer is None:
        return None
    challenge = _take(answer, Purpose.VOTE, user=user, proposal_id=proposal_id, action_digest=digest)
    if challenge is None or not base64url.decode(challenge.challenge).endswith(
        _vote_binding(proposal_id, digest)
    ):
        return None
    return _verify_assertion(user, answer, challenge)


def verify_confirm(user, answer) -> WebAuthnCredential | None:
    """The passkey of `user` that answered their own Your devices challenge, or None."""
    answer = _parse(answer)
    challenge = _take(answer, Purpose.CONFIRM, user=user) if answer is not None else None
    return _verify_assertion(user, answer, challenge) if challenge is not None else None


def register(user, answer, name: str) -> WebAuthnCredential:
    """Check a registration answer against this person's open registration challenge and store the
    passkey, named. Runs inside the caller's transaction (devices.register_passkey, which audits it)."""
    parsed = _parse(answer)
    challenge = _take(parsed, Purpose.REGISTER, user=user) if parsed is not None else None
    if challenge is None:
        raise PasskeyRefused("that passkey request expired or was already used; try again")
    try:
        device = _Helper(request=None).register_complete(user, challenge.state, parsed)
    except (WebAuthnException, KeyError, TypeError, ValueError) as error:
        raise PasskeyRefused("the browser's answer could not be verified; try again") from error
    device.name = name
    device.save(update_fields=["name"])
    return device
