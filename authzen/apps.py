from django.apps import AppConfig


class AuthzenConfig(AppConfig):
    name = "authzen"
    verbose_name = "OpenID AuthZEN access evaluation"
