"""`manage.py rotate_signing_key [--prune | --prune-only] [--operator USERNAME]`.

Adds a new Ed25519 key (a file in REVIEWER_SIGNING_KEY_DIR) and signs with it from then on. On a new
deployment with DEBUG=false (where no key is generated) its first run makes the first key. The retired
key's public half stays in /.well-known/jwks.json until every token it signed has expired
(DECISION_TOKEN_MAX_SECONDS, plus a grace for verifiers' clock skew). `--prune` then deletes the
private half of retired keys no unexpired token can need (their public half is kept, out of the JWKS,
so old audit checkpoints still verify). Prints key ids only, never key material.
"""

from datetime import timedelta

from django.conf import settings
from django.core.management.base import CommandError
from django.utils import timezone

import signing_keys as keys
from approvals.management.commands._base import OperatorCommand
from approvals.services.agents import rotate_signing_key


class Command(OperatorCommand):
    help = "Add a new signing key and sign with it from now on; optionally prune retired keys."

    def add_arguments(self, parser):
        prune = parser.add_mutually_exclusive_group()
        prune.add_argument(
            "--prune",
            action="store_true",
            help="after rotating, delete retired private keys no unexpired token can need",
        )
        prune.add_argument("--prune-only", action="store_true", help="prune without adding a key")
        self.add_operator_argument(parser, "rotating")

    def handle(self, *args, **options):
        if not options["prune_only"]:
            first = not keys.all_keys()
            try:
                kid = rotate_signing_key(actor=self.operator(options))
            except RuntimeError as error:  # REVIEWER_SIGNING_KEY given in the environment
                raise CommandError(str(error)) from error
            what = "first signing key" if first else "new signing key"
            self.stdout.write(f"{what} {kid}: everything is signed with it from now on")
        if options["prune"] or options["prune_only"]:
            pruned = keys.prune_expired()
            self.stdout.write(f"pruned {len(pruned)} retired private key(s)")
            for kid in pruned:
                self.stdout.write(f"  {kid}  private half deleted (public half kept for old checkpoints)")
        self.write_published()

    def write_published(self):
        keep = timedelta(seconds=settings.DECISION_TOKEN_MAX_SECONDS) + keys.RETIREMENT_GRACE
        self.stdout.write("published in the JWKS:")
        for key in keys.published_keys(timezone.now()):
            if key.retired_at is None:
                self.stdout.write(f"  {key.kid}  active")
            else:
                until = key.retired_at + keep
                self.stdout.write(
                    f"  {key.kid}  retired {key.retired_at:%Y-%m-%d %H:%M:%S} UTC, "
                    f"published until {until:%Y-%m-%d %H:%M:%S} UTC"
                )
