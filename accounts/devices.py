"""A person's second factor (django-otp devices). Codes and keys never reach the audit trail.

Every change to a person's factors after their first enrollment takes a `Confirmation`
(accounts/factors.py: a factor at least as strong as their strongest, used just now), is audited, and
e-mails the person (accounts/notices.py)."""

from django.db import transaction

from accounts import factors
from accounts.notices import tell_person
from audit.labels import SYSTEM, actor_label, user_label
from audit.models import Verb
from audit.trail import record
from lib.errors import Conflict, DeviceResetRefused, FactorChangeRefused, NotFound, ServiceError
from tenants.models import TenantMembership
from tenants.queries import memberships_of, tenant_ids_of

BACKUP_CODE_COUNT = 10


def person_chains(user) -> list[int | None]:
    """A device belongs to a person, not a tenant: every tenant they work in records the change."""
    chains: list[int | None] = list(tenant_ids_of(user))
    return chains or [None]


def record_for_person(person, *, actor: str, verb: str, data: dict) -> None:
    """One event about `person` (subject: their pseudonym) in the chain of every tenant they work in, or
    the system chain for someone in none; inside the caller's transaction."""
    for tenant_id in person_chains(person):
        record(tenant_id, actor=actor, verb=verb, subject=user_label(person), data=data)


def record_sign_in_code_refused(user) -> None:
    """The right password with a wrong one-time code: the password may be known to someone else, which
    the person's tenants should see. Nothing typed is recorded. (A wrong password is not recorded: anyone
    could flood the trail with those; sign-in throttling is recorded by record_sign_in_throttled.) At most
    AXES_FAILURE_LIMIT of these per cool-down, since axes counts them."""
    with transaction.atomic():
        record_for_person(user, actor=actor_label(user), verb=Verb.SIGN_IN_CODE_REFUSED, data={})


def record_sign_in_throttled(
    *, username: str, address: str, since, failure_limit: int, cool_off_seconds: int
) -> bool:
    """One event when an account or a client address reaches the sign-in failure limit, in the chains of
    the person's tenants (the system chain for an unknown name). Further refused attempts in the same
    cool-down (since `since`) are not recorded again: the trail must not be floodable. Returns whether it
    recorded."""
    from django.contrib.auth import get_user_model

    from audit.models import AuditEvent

    person = get_user_model().objects.filter(username=username).first()
    # A person by pseudonym (erasable); a name nobody has is kept as typed.
    subject = user_label(person) if person is not None else f"sign_in:{username}"
    with transaction.atomic():
        if AuditEvent.objects.filter(
            subject=subject, verb=Verb.SIGN_IN_THROTTLED, at__gte=since, data__address=address
        ).exists():
            return False
        for tenant_id in person_chains(person) if person is not None else [None]:
            record(
                tenant_id,
                actor=SYSTEM,
                verb=Verb.SIGN_IN_THROTTLED,
                subject=subject,
                data={
                    "address": address,
                    "failure_limit": failure_limit,
                    "cool_off_seconds": cool_off_seconds,
                },
            )
    return True


def require_confirmation(user, confirmation, what: str) -> None:
    """Refuse `what` ("adding a passkey") unless `confirmation` is strong enough for this person; the
    refusal is recorded (an attempt with a stolen session is evidence) and names the factor needed."""
    message = factors.refusal(user, confirmation, what)
    if message is None:
        return
    with transaction.atomic():
        record_for_person(
            user,
            actor=actor_label(user),
            verb=Verb.DEVICE_CHANGE_REFUSED,
            data={
                "change": what,
                "needed": factors.needed_for_change(user),
                "confirmed_with": confirmation.method if confirmation is not None else None,
            },
        )
    raise FactorChangeRefused("confirm_first", message)


def _enrolling_device(device_model, user):
    return device_model.objects.select_for_update().filter(user=user, confirmed=False).order_by("id").first()


def start_totp_enrollment(user):
    """The authenticator a person is setting up: the same unconfirmed device until they confirm it."""
    from django_otp.plugins.otp_totp.models import TOTPDevice

    with transaction.atomic():
        device = _enrolling_device(TOTPDevice, user)
        if device is None:
            device = TOTPDevice.objects.create(user=user, name="authenticator", confirmed=False)
    return device


def confirm_totp_enrollment(user, *, code: str) -> tuple[object, list[str]]:
    """Confirm the authenticator with a code it shows and issue backup codes. Returns (device, codes):
    the codes are shown once. A wrong code counts against django-otp's throttle, so it commits first."""
    from django_otp.plugins.otp_totp.models import TOTPDevice

    if factors.needed_for_change(user) is not None:
        raise Conflict(
            "already_enrolled",
            "you already have a second factor: add an authenticator app under Your devices",
            "otp_token",
        )
    with transaction.atomic():
        device, refusal = _check_enrolling_code(TOTPDevice, user, code, "your authenticator")
        if refusal is None:
            device.confirmed = True
            device.save(update_fields=["confirmed"])
            codes = _new_backup_codes(user)
            record_for_person(
                user,
                actor=actor_label(user),
                verb=Verb.DEVICE_ENROLLED,
                data={"device": "totp", "backup_codes": BACKUP_CODE_COUNT},
            )
            tell_person(user, "An authenticator app and backup codes were set up")
    if refusal is not None:
        raise refusal
    return device, codes


def _check_enrolling_code(device_model, user, code: str, shown_by: str):
    """The app being set up and, if `code` is not what it shows now, the refusal to raise once the
    transaction has kept the device's counters (None when it is)."""
    device = _enrolling_device(device_model, user)
    if device is None:
        raise Conflict("no_enrollment", "no authenticator is being set up; start again", "otp_token")
    if device.verify_token((code or "").strip().replace(" ", "")):
        return device, None
    return device, ServiceError(
        "bad_code", f"that is not the code {shown_by} shows now; type the current six digits", "otp_token"
    )


def _new_backup_codes(user) -> list[str]:
    from django_otp.plugins.otp_static.models import StaticDevice, StaticToken

    StaticDevice.objects.filter(user=user).delete()
    backup = StaticDevice.objects.create(user=user, name="backup codes", confirmed=True)
    codes = [StaticToken.random_token() for _ in range(BACKUP_CODE_COUNT)]
    StaticToken.objects.bulk_create([StaticToken(device=backup, token=c) for c in codes])
    return codes


def add_authenticator(user, *, code: str, confirmation) -> object:
    """Confirm the authenticator app being set up (start_totp_enrollment) with a code it shows; it
    replaces the person's earlier app (a new phone). Needs a confirmation (require_confirmation)."""
    from django_otp.plugins.otp_totp.models import TOTPDevice

    require_confirmation(user, confirmation, "adding an authenticator app")
    with transaction.atomic():
        device, refusal = _check_enrolling_code(TOTPDevice, user, code, "your new authenticator")
        if refusal is None:
            replaced = TOTPDevice.objects.filter(user=user, confirmed=True).exclude(pk=device.pk)
            count = replaced.count()
            replaced.delete()
            device.confirmed = True
            device.save(update_fields=["confirmed"])
            record_for_person(
                user,
                actor=actor_label(user),
                verb=Verb.DEVICE_ENROLLED,
                data={"device": "totp", "replaced": count, "confirmed_with": confirmation.method},
            )
            tell_person(user, "A new authenticator app was set up (it replaces the earlier one)")
    if refusal is not None:
        raise refusal
    return device


def generate_backup_codes(user, *, confirmation) -> list[str]:
    """New backup codes in place of the old ones (all of which stop working); shown once by the caller."""
    require_confirmation(user, confirmation, "making new backup codes")
    with transaction.atomic():
        codes = _new_backup_codes(user)
        record_for_person(
            user,
            actor=actor_label(user),
            verb=Verb.DEVICE_ENROLLED,
            data={
                "device": "backup_codes",
                "backup_codes": BACKUP_CODE_COUNT,
                "confirmed_with": confirmation.method,
            },
        )
        tell_person(user, "New backup codes were made (the earlier ones no longer work)")
    return codes


def reset_devices(user, *, actor, reason: str = "") -> int:
    """An admin removes a person's authenticators and backup codes (a lost phone). Sessions verified
    with them stop being verified; the person enrolls again at their next sign-in. Returns how many."""
    from django_otp import devices_for_user

    if not _may_administer(actor, user):
        raise DeviceResetRefused(
            "not_allowed", "only an admin of one of this person's tenants can reset their devices"
        )
    with transaction.atomic():
        devices = list(devices_for_user(user, confirmed=None))
        for device in devices:
            device.delete()
        record_for_person(
            user,
            actor=actor_label(actor),
            verb=Verb.DEVICE_RESET,
            data={"devices_removed": len(devices), "reason": reason},
        )
        tell_person(user, "Your second factors were reset: set up a new one at your next sign-in", by=actor)
    return len(devices)


def _may_administer(actor, user) -> bool:
    shared_admin = (
        memberships_of(actor, {TenantMembership.Role.ADMIN})
        .filter(tenant_id__in=memberships_of(user).values("tenant_id"))
        .exists()
    )
    return actor is not None and (actor.is_superuser or shared_admin)


def vouch_for_new_passkeys(user, *, actor, reason: str = "") -> int:
    """An admin who confirmed with the person (not through Reviewer) that the passkeys they added in
    their cool-off are theirs ends the cool-off of each: they count as passkeys at once. Nobody vouches
    for their own. Returns how many."""
    from django_otp_webauthn.models import WebAuthnCredential

    from accounts.models import PasskeyVouch
    from accounts.passkeys import cool_off_until

    if actor is None or actor.pk == user.pk:
        raise DeviceResetRefused("not_allowed", "an admin vouches for someone else's passkeys, not their own")
    if not _may_administer(actor, user):
        raise DeviceResetRefused(
            "not_allowed", "only an admin of one of this person's tenants can vouch for their passkeys"
        )
    reason = " ".join((reason or "").split())[:200]
    with transaction.atomic():
        cooling = [
            device
            for device in WebAuthnCredential.objects.select_for_update().filter(user=user, confirmed=True)
            if cool_off_until(device) is not None
        ]
        for device in cooling:
            PasskeyVouch.objects.create(passkey=device, vouched_by=actor, reason=reason)
            record_for_person(
                user,
                actor=actor_label(actor),
                verb=Verb.PASSKEY_VOUCHED,
                data={"passkey": device.pk, "name": device.name, "reason": reason},
            )
        if cooling:
            names = ", ".join(f"“{device.name}”" for device in cooling)
            tell_person(user, f"An admin vouched for your new passkey(s) {names}", by=actor)
    return len(cooling)


# Passkeys (accounts/passkeys.py checks the WebAuthn ceremonies). A person may have several, named;
# they add and remove their own with a confirmation (require_confirmation), and rename them freely.

PASSKEY_NAME_MAX = 64


def _passkey_name(name: str) -> str:
    name = " ".join((name or "").split())[:PASSKEY_NAME_MAX]
    if not name:
        raise ServiceError(
            "name_required", "give the passkey a name you will recognise, e.g. “work laptop”", "name"
        )
    return name


def register_passkey(user, *, answer, name: str, confirmation):
    """Store the passkey the browser just created (its answer to this person's registration challenge).
    It starts its cool-off (passkeys.cool_off_until)."""
    from accounts.passkeys import PasskeyRefused, cool_off_until, register

    name = _passkey_name(name)
    require_confirmation(user, confirmation, "adding a passkey")
    with transaction.atomic():
        try:
            device = register(user, answer, name)
        except PasskeyRefused as error:
            raise ServiceError("passkey_refused", str(error), "passkey") from error
        until = cool_off_until(device)
        record_for_person(
            user,
            actor=actor_label(user),
            verb=Verb.DEVICE_ENROLLED,
            data={
                "device": "passkey",
                "passkey": device.pk,
                "name": name,
                "confirmed_with": confirmation.method if confirmation is not None else None,
                "cool_off_until": until.isoformat() if until is not None else None,
            },
        )
        tell_person(user, f"A passkey “{name}” was added", cool_off_until=until)
    return device


def _own_passkey(user, passkey_id):
    from django_otp_webauthn.models import WebAuthnCredential

    device = WebAuthnCredential.objects.select_for_update().filter(user=user, pk=passkey_id).first()
    if device is None:
        raise NotFound("not_found", "no such passkey")
    return device


def _owns_passkey(user, passkey_id) -> bool:
    from django_otp_webauthn.models import WebAuthnCredential

    return WebAuthnCredential.objects.filter(user=user, pk=passkey_id).exists()


def rename_passkey(user, passkey_id, *, name: str):
    name = _passkey_name(name)
    with transaction.atomic():
        device = _own_passkey(user, passkey_id)
        before, device.name = device.name, name
        device.save(update_fields=["name"])
        record_for_person(
            user,
            actor=actor_label(user),
            verb=Verb.PERSON_CHANGED,
            data={"changed": ["passkey_name"], "passkey": device.pk, "before": before, "name": name},
        )
    return device


def remove_passkey(user, passkey_id, *, confirmation) -> None:
    """A person removes one of their passkeys; not their last second factor (they could not sign in)."""
    from django_otp import devices_for_user
    from django_otp.plugins.otp_static.models import StaticDevice

    if not _owns_passkey(user, passkey_id):
        raise NotFound("not_found", "no such passkey")
    require_confirmation(user, confirmation, "removing a passkey")
    with transaction.atomic():
        device = _own_passkey(user, passkey_id)
        others = [
            d
            for d in devices_for_user(user, confirmed=True, for_verify=True)
            if not isinstance(d, StaticDevice) and (d.__class__, d.pk) != (device.__class__, device.pk)
        ]
        if not others:
            raise Conflict(
                "last_device",
                "this is your only second factor: add another passkey or an authenticator app first",
            )
        name = device.name
        device.delete()
        record_for_person(
            user,
            actor=actor_label(user),
            verb=Verb.DEVICE_RESET,
            data={
                "device": "passkey",
                "passkey": passkey_id,
                "name": name,
                "devices_removed": 1,
                "confirmed_with": confirmation.method if confirmation is not None else None,
            },
        )
        tell_person(user, f"The passkey “{name}” was removed")
