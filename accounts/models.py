"""What accounts stores: passkey challenges, admins' vouches for new passkeys, and the second-factor
devices under names people read in the admin (proxies of django-otp's and django-otp-webauthn's models:
no tables of their own)."""

from django.conf import settings
from django.db import models
from django_otp.plugins.otp_static.models import StaticDevice
from django_otp.plugins.otp_totp.models import TOTPDevice
from django_otp_webauthn.models import WebAuthnCredential


class AuthenticatorApp(TOTPDevice):
    class Meta:
        proxy = True
        verbose_name = "authenticator app"
        verbose_name_plural = "authenticator apps"


class BackupCodes(StaticDevice):
    class Meta:
        proxy = True
        verbose_name = "set of backup codes"
        verbose_name_plural = "backup codes"


class Passkey(WebAuthnCredential):
    class Meta:
        proxy = True
        verbose_name = "passkey"
        verbose_name_plural = "passkeys"


class PasskeyChallenge(models.Model):
    """One WebAuthn challenge, usable once (used_at is set by compare-and-set) and for a few minutes.
    A vote's challenge is bound to the proposal and the action digest the person was shown; a
    registration's to the person registering. A sign-in's (signed, not stored when it is handed out:
    anyone may ask for one) is recorded here when it is used, so it cannot be used again."""

    class Purpose(models.TextChoices):
        REGISTER = "register"
        SIGN_IN = "sign_in"
        VOTE = "vote"
        CONFIRM = "confirm"  # the person confirms it is them before changing their factors

    challenge = models.CharField(max_length=255, unique=True)  # base64url, as clientDataJSON carries it
    purpose = models.CharField(max_length=16, choices=Purpose.choices)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE)
    proposal_id = models.UUIDField(null=True, blank=True)
    action_digest = models.CharField(max_length=80, blank=True)
    state = models.JSONField(default=dict, blank=True)  # registration: what django-otp-webauthn checks
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"{self.purpose} challenge {self.challenge[:8]}…"


class PasskeyVouch(models.Model):
    """An admin confirmed with the person (in person, on a call) that a passkey added during its cool-off
    is theirs: it then counts as a passkey at once (accounts/factors.py). Written by
    devices.vouch_for_passkey, with its audit event."""

    passkey = models.OneToOneField(WebAuthnCredential, on_delete=models.CASCADE, related_name="vouch")
    vouched_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    vouched_at = models.DateTimeField(auto_now_add=True)
    reason = models.CharField(max_length=200, blank=True)

    def __str__(self):
        return f"vouch for passkey {self.passkey_id}"
