"""The admin app with Reviewer's site as its default (in INSTALLED_APPS instead of django.contrib.admin).
The site class is named by its dotted path, so it is imported only once the apps are ready. Its ready()
also wires the project's own database hook (the pool's checks)."""

from django.contrib.admin.apps import AdminConfig
from django.db.backends.signals import connection_created


class ReviewerAdminConfig(AdminConfig):
    default_site = "reviewer.admin_site.ReviewerAdminSite"

    def ready(self) -> None:
        super().ready()
        from lib.storage import pool_checks

        # The pool's health check, only for a connection that may have died (lib/storage/pool_checks.py).
        connection_created.connect(pool_checks.check_taken, dispatch_uid="reviewer-pool-checks")
