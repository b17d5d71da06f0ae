"""Second-factor devices in the admin under names people read: "Authenticator apps", "Backup codes" and
"Passkeys" (proxies, accounts/models.py) instead of django-otp's "TOTP devices" and "Static devices".

Who sees them is unchanged: the superuser (tenant admins get no permission on these models). Passkeys are
shown, not edited: a person names and removes their own on Your devices, and an admin resets a person's
devices with the audited action on the people list.
"""

from django.contrib import admin
from django_otp.plugins.otp_static.admin import StaticDeviceAdmin
from django_otp.plugins.otp_static.models import StaticDevice
from django_otp.plugins.otp_totp.admin import TOTPDeviceAdmin
from django_otp.plugins.otp_totp.models import TOTPDevice
from django_otp_webauthn.admin import WebAuthnCredentialAdmin

from accounts.models import AuthenticatorApp, BackupCodes, Passkey

for model in (TOTPDevice, StaticDevice):
    if admin.site.is_registered(model):
        admin.site.unregister(model)

admin.site.register(AuthenticatorApp, TOTPDeviceAdmin)
admin.site.register(BackupCodes, StaticDeviceAdmin)


@admin.register(Passkey)
class PasskeyAdmin(WebAuthnCredentialAdmin):
    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
