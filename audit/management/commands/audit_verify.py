"""`manage.py audit_verify [--tenant SLUG] [--chain NAME] [--jwks FILE] [--checkpoints PATH]
[--previous BUNDLE]`: chain what
has committed, then check every hash, link and checkpoint, in the database and in the checkpoint files
kept outside it; print the first bad event of each broken chain; exit status 1 if any chain is broken."""

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from audit.chain.verification import all_chains, verify_chain
from audit.labels import tenant_chain
from tenants import queries as tenant_queries


class Command(BaseCommand):
    help = "Verify the audit hash chains and their signed checkpoints; names the first bad event."

    def add_arguments(self, parser):
        scope = parser.add_mutually_exclusive_group()
        scope.add_argument("--tenant", metavar="SLUG", help="only this tenant's chain (slug or id)")
        scope.add_argument("--chain", metavar="NAME", help="only this chain (e.g. system, tenant:3)")
        parser.add_argument(
            "--jwks",
            metavar="FILE",
            help="check checkpoint signatures against these public keys "
            "only (default: every key the audit tables archived)",
        )
        parser.add_argument(
            "--previous",
            metavar="BUNDLE",
            type=Path,
            help="an earlier bundle of the chain: the database must still hold what it held; a rewritten "
            "event is named exactly by its seq",
        )
        parser.add_argument(
            "--checkpoints",
            metavar="PATH",
            type=Path,
            help="the checkpoint files shipped elsewhere (a directory of <chain>.jsonl, or one file) "
            "to check the database against (default: AUDIT_CHECKPOINT_DIR)",
        )

    def handle(self, *args, **options):
        source = options["checkpoints"]
        if source is not None and not source.exists():
            # Checked first: a mistyped path would otherwise verify against no checkpoint at all and
            # report OK, exactly when the shipped copy is what a restore is checked against.
            raise CommandError(
                f"no checkpoint files at {source} (--checkpoints takes the shipped folder of "
                "<chain>.jsonl files, or one such file)"
            )
        if options["tenant"]:
            tenant = tenant_queries.tenant_by_key(options["tenant"])
            if tenant is None:
                raise CommandError(f"no tenant {options['tenant']!r}")
            chains = [tenant_chain(tenant.id)]
        elif options["chain"]:
            chains = [options["chain"]]
        else:
            chains = all_chains(options["checkpoints"])
        jwks = None
        if options["jwks"]:
            with open(options["jwks"], "rb") as file:
                jwks = json.load(file)
        broken = []
        for chain in chains:
            try:
                result = verify_chain(
                    chain, jwks, checkpoint_source=options["checkpoints"], previous=options["previous"]
                )
            except Exception as error:  # noqa: BLE001 - a trail this broken is a finding, not a traceback
                broken.append(chain)
                self.stdout.write(self.style.ERROR(f"{chain}: FAILED, could not be verified: {error!r}"))
                continue
            if result.ok:
                self.stdout.write(f"{chain}: OK, {result.events} events, {result.checkpoints} checkpoints")
                continue
            broken.append(chain)
            where = f"seq {result.first_bad_seq}" if result.first_bad_seq is not None else "none named"
            self.stdout.write(self.style.ERROR(f"{chain}: FAILED, first bad event: {where}"))
            for problem in result.problems:
                self.stdout.write(f"  {problem}")
        if not chains:
            self.stdout.write("no audit events yet")
        if broken:
            raise CommandError(
                f"{len(broken)} of {len(chains)} chain(s) failed verification: {', '.join(broken)}",
                returncode=1,
            )
