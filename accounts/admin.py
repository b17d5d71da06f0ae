"""People in the admin (the User admin, below), and their second-factor devices under names people read:
"Authenticator apps", "Backup codes" and "Passkeys" (proxies, accounts/models.py) instead of django-otp's
"TOTP devices" and "Static devices".

Who sees the devices: the superuser (tenant admins get no permission on these models). Passkeys are
shown, not edited: a person names and removes their own on Your devices, and an admin resets a person's
devices, or vouches for their new passkeys, with the audited actions on the people list.
"""

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django_otp.plugins.otp_static.admin import StaticDeviceAdmin
from django_otp.plugins.otp_static.models import StaticDevice
from django_otp.plugins.otp_totp.admin import TOTPDeviceAdmin
from django_otp.plugins.otp_totp.models import TOTPDevice
from django_otp_webauthn.admin import WebAuthnCredentialAdmin

from accounts.devices import reset_devices, vouch_for_new_passkeys
from accounts.models import AuthenticatorApp, BackupCodes, Passkey
from accounts.people import person_values, record_person_changed
from lib.errors import ServiceError
from tenants.queries import people_visible_to

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


# ---------------------------------------------------------------------------------------------------
# People. A superuser manages every account. A tenant admin (staff, not superuser) sees only the people
# who share a tenant she administers, never a superuser, and may change only their names and e-mail and
# reset their authenticator: flags, permissions, groups and passwords are the superuser's alone, so a
# tenant admin cannot raise herself or anyone else. Every change is recorded in the person's tenants'
# chains (people.record_person_changed; the device reset by devices.reset_devices).


@admin.action(description="Reset one-time-code devices (they enroll again at next sign-in)")
def reset_otp_devices(modeladmin, request, queryset):
    for user in queryset:
        try:
            removed = reset_devices(user, actor=request.user, reason="reset in the admin")
        except ServiceError as error:
            modeladmin.message_user(request, f"{user}: {error.message}", level=messages.ERROR)
        else:
            modeladmin.message_user(request, f"{user}: {removed} device(s) removed")


@admin.action(description="Vouch for their new passkeys (you asked them, not through Reviewer)")
def vouch_for_passkeys(modeladmin, request, queryset):
    for user in queryset:
        try:
            vouched = vouch_for_new_passkeys(user, actor=request.user, reason="vouched in the admin")
        except ServiceError as error:
            modeladmin.message_user(request, f"{user}: {error.message}", level=messages.ERROR)
        else:
            modeladmin.message_user(
                request,
                f"{user}: {vouched} new passkey(s) vouched for; they confirm passkey-only decisions now"
                if vouched
                else f"{user}: no passkey in its cool-off",
            )


# What a tenant admin may change on a person's page.
TENANT_ADMIN_PERSON_FIELDS = ("first_name", "last_name", "email")


class ReviewerUserAdmin(UserAdmin):
    actions = [reset_otp_devices, vouch_for_passkeys]

    def get_queryset(self, request):
        return people_visible_to(request.user, super().get_queryset(request))

    def has_add_permission(self, request):
        # A new account starts with a password: the superuser's act (or manage.py / the setup command).
        return request.user.is_superuser and super().has_add_permission(request)

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser and super().has_delete_permission(request, obj)

    def get_fieldsets(self, request, obj=None):
        if request.user.is_superuser or obj is None:
            return super().get_fieldsets(request, obj)
        return (
            (None, {"fields": ("username",)}),
            ("Personal info", {"fields": TENANT_ADMIN_PERSON_FIELDS}),
            ("Status", {"fields": ("is_active", "is_staff", "is_superuser", "last_login", "date_joined")}),
        )

    def get_readonly_fields(self, request, obj=None):
        if request.user.is_superuser:
            return super().get_readonly_fields(request, obj)
        return ("username", "is_active", "is_staff", "is_superuser", "last_login", "date_joined")

    def user_change_password(self, request, id, form_url=""):
        if not request.user.is_superuser:
            raise PermissionDenied("only a superuser sets another person's password")
        response = super().user_change_password(request, id, form_url)
        if request.method == "POST" and response.status_code == 302:
            person = self.get_object(request, id)
            record_person_changed(person, actor=request.user, changed=["password"])
        return response

    def save_model(self, request, obj, form, change):
        before = person_values(self.model.objects.get(pk=obj.pk)) if change else {}
        super().save_model(request, obj, form, change)
        changed = list(form.changed_data) if change else ["created"]
        record_person_changed(obj, actor=request.user, changed=changed, before=before)


admin.site.unregister(get_user_model())
admin.site.register(get_user_model(), ReviewerUserAdmin)


class SuperuserOnlyGroupAdmin(GroupAdmin):
    """Django's permission groups are the superuser's tool (the `Tenant admins` group is one): a tenant
    admin works with approver groups and never sees these, even with a permission that names them."""

    def has_module_permission(self, request):
        return request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        return request.user.is_superuser

    def has_add_permission(self, request):
        return request.user.is_superuser

    def has_change_permission(self, request, obj=None):
        return request.user.is_superuser

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser


admin.site.unregister(Group)
admin.site.register(Group, SuperuserOnlyGroupAdmin)
