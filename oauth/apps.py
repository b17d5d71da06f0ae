from django.apps import AppConfig


class OAuthConfig(AppConfig):
    name = "oauth"
    verbose_name = "OAuth doors (TAC, CIBA)"
    default_auto_field = "django.db.models.BigAutoField"
