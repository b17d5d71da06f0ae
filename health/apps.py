from django.apps import AppConfig


class HealthConfig(AppConfig):
    name = "health"
    verbose_name = "Health probes"
