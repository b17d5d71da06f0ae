"""A person's second factor (django-otp devices). Codes and keys never reach the audit trail."""

from django.db import transaction

from audit.models import Verb
from audit.trail import SYSTEM, actor_label, record
from lib.errors import Conflict, DeviceResetRefused, NotFound, ServiceError
from tenants.models import TenantMembership
from tenants.queries import memberships_of, tenant_ids_of

BACKUP_CODE_COUNT = 10


def person_chains(user) -> list[int | None]:
    """A device belongs to a person, not a tenant: every tenant they work in records the change."""
    return tenant_ids_of(user) or [None]


def record_for_person(person, *, actor: str, verb: str, data: dict) -> None:
    """One event about `person` (subject user:<username>) in the chain of every tenant they work in, or
    the system chain for someone in none; inside the caller's transaction."""
    for tenant_id in person_chains(person):
        record(tenant_id, actor=actor, verb=verb, subject=f"user:{person.get_username()}", data=data)


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

    subject = f"sign_in:{username}"
    with transaction.atomic():
        if AuditEvent.objects.filter(
            subject=subject, verb=Verb.SIGN_IN_THROTTLED, at__gte=since, data__address=address
        ).exists():
            return False
        person = get_user_model().objects.filter(username=username).first()
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
    from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
    from django_otp.plugins.otp_totp.models import TOTPDevice

    refusal: ServiceError | None = None
    with transaction.atomic():
        device = _enrolling_device(TOTPDevice, user)
        if device is None:
            raise Conflict("no_enrollment", "no authenticator is being set up; start again", "otp_token")
        if not device.verify_token((code or "").strip().replace(" ", "")):
            refusal = ServiceError(
                "bad_code",
                "that is not the code your authenticator shows now; type the current six digits",
                "otp_token",
            )
        else:
            device.confirmed = True
            device.save(update_fields=["confirmed"])
            StaticDevice.objects.filter(user=user).delete()
            backup = StaticDevice.objects.create(user=user, name="backup codes", confirmed=True)
            codes = [StaticToken.random_token() for _ in range(BACKUP_CODE_COUNT)]
            StaticToken.objects.bulk_create([StaticToken(device=backup, token=c) for c in codes])
            record_for_person(
                user,
                actor=actor_label(user),
                verb=Verb.DEVICE_ENROLLED,
                data={"device": "totp", "backup_codes": BACKUP_CODE_COUNT},
            )
    if refusal is not None:
        raise refusal
    return device, codes


def reset_devices(user, *, actor, reason: str = "") -> int:
    """An admin removes a person's authenticators and backup codes (a lost phone). Sessions verified
    with them stop being verified; the person enrolls again at their next sign-in. Returns how many."""
    from django_otp import devices_for_user

    shared_admin = (
        memberships_of(actor, {TenantMembership.Role.ADMIN})
        .filter(tenant_id__in=memberships_of(user).values("tenant_id"))
        .exists()
    )
    if actor is None or not (actor.is_superuser or shared_admin):
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
    return len(devices)


# Passkeys (accounts/passkeys.py checks the WebAuthn ceremonies). A person may have several, named;
# they add, rename and remove their own after signing in with their current factor.

PASSKEY_NAME_MAX = 64


def _passkey_name(name: str) -> str:
    name = " ".join((name or "").split())[:PASSKEY_NAME_MAX]
    if not name:
        raise ServiceError(
            "name_required", "give the passkey a name you will recognise, e.g. “work laptop”", "name"
        )
    return name


def register_passkey(user, *, answer, name: str):
    """Store the passkey the browser just created (its answer to this person's registration challenge)."""
    from accounts.passkeys import PasskeyRefused, register

    name = _passkey_name(name)
    with transaction.atomic():
        try:
            device = register(user, answer, name)
        except PasskeyRefused as error:
            raise ServiceError("passkey_refused", str(error), "passkey") from error
        record_for_person(
            user,
            actor=actor_label(user),
            verb=Verb.DEVICE_ENROLLED,
            data={"device": "passkey", "passkey": device.pk, "name": name},
        )
    return device


def _own_passkey(user, passkey_id):
    from django_otp_webauthn.models import WebAuthnCredential

    device = WebAuthnCredential.objects.select_for_update().filter(user=user, pk=passkey_id).first()
    if device is None:
        raise NotFound("not_found", "no such passkey")
    return device


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


def remove_passkey(user, passkey_id) -> None:
    """A person removes one of their passkeys; not their last second factor (they could not sign in)."""
    from django_otp import devices_for_user
    from django_otp.plugins.otp_static.models import StaticDevice

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
            data={"device": "passkey", "passkey": passkey_id, "name": name, "devices_removed": 1},
        )
