"""`manage.py scim_token <tenant>`: a new SCIM bearer token for the tenant (the old one stops working).
Printed once; only its SHA-256 is stored."""

from django.core.management.base import BaseCommand, CommandError

from sso.models import IdentityProvider
from sso.scim.auth import issue_token


class Command(BaseCommand):
    help = "Issue the tenant's SCIM bearer token (replacing the old one) and print it once."

    def add_arguments(self, parser):
        parser.add_argument("tenant", help="the tenant's slug")

    def handle(self, *args, tenant, **options):
        provider = IdentityProvider.objects.filter(tenant__slug=tenant).first()
        if provider is None:
            raise CommandError(f"tenant {tenant!r} has no identity provider: add one in the admin first")
        self.stdout.write(issue_token(provider))
