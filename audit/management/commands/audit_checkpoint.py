"""`manage.py audit_checkpoint [--tenant SLUG | --chain NAME] [--due]`: sign chain heads now. The worker
does this on its own every AUDIT_CHECKPOINT_SECONDS; this is for an operator (e.g. before a backup)."""

from django.core.management.base import BaseCommand, CommandError

from audit.chain.checkpoints import checkpoint_head, write_due_checkpoints
from audit.chain.verification import all_chains
from audit.labels import tenant_chain
from tenants import queries as tenant_queries


class Command(BaseCommand):
    help = "Write a signed checkpoint of each chain head (or only the ones due, with --due)."

    def add_arguments(self, parser):
        scope = parser.add_mutually_exclusive_group()
        scope.add_argument("--tenant", metavar="SLUG", help="only this tenant's chain (slug or id)")
        scope.add_argument("--chain", metavar="NAME", help="only this chain")
        scope.add_argument(
            "--due",
            action="store_true",
            help="only heads that moved and whose last checkpoint is older than AUDIT_CHECKPOINT_SECONDS",
        )

    def handle(self, *args, **options):
        if options["due"]:
            written = write_due_checkpoints()
        else:
            if options["tenant"]:
                tenant = tenant_queries.tenant_by_key(options["tenant"])
                if tenant is None:
                    raise CommandError(f"no tenant {options['tenant']!r}")
                chains = [tenant_chain(tenant.id)]
            else:
                chains = [options["chain"]] if options["chain"] else all_chains()
            written = [c for c in map(checkpoint_head, chains) if c is not None]
        for checkpoint in written:
            self.stdout.write(f"{checkpoint.chain}: head seq {checkpoint.seq} signed ({checkpoint.kid})")
        if not written:
            self.stdout.write("nothing to sign")
