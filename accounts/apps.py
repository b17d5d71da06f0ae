from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"

    def ready(self):
        from axes.signals import user_locked_out

        from accounts.throttle import record_lockout

        user_locked_out.connect(record_lockout, dispatch_uid="accounts.record_lockout")
