"""Your devices and the passkey ceremonies (under /accounts/; sign-in and enrollment are named in
reviewer/urls.py and approvals/urls.py)."""

from django.urls import path

from accounts import views

app_name = "accounts"

urlpatterns = [
    path("devices/", views.devices, name="devices"),
    path("devices/confirm", views.confirm, name="confirm"),
    path("devices/authenticator", views.authenticator, name="authenticator"),
    path("devices/backup-codes", views.backup_codes, name="backup_codes"),
    path("passkeys/confirm-options", views.passkey_confirm_options, name="passkey_confirm_options"),
    path("passkeys/options", views.passkey_registration_options, name="passkey_registration_options"),
    path("passkeys/", views.passkey_register, name="passkey_register"),
    path("passkeys/<int:passkey_id>/rename", views.passkey_rename, name="passkey_rename"),
    path("passkeys/<int:passkey_id>/remove", views.passkey_remove, name="passkey_remove"),
    path("passkeys/sign-in-options", views.passkey_sign_in_options, name="passkey_sign_in_options"),
]
