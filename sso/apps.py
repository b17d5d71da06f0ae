from django.apps import AppConfig


class SsoConfig(AppConfig):
    name = "sso"
    verbose_name = "Single sign-on and provisioning"
    default_auto_field = "django.db.models.BigAutoField"
