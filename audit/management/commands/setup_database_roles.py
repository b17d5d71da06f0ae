"""`manage.py setup_database_roles --owner reviewer_owner --app reviewer_app [--sequencer reviewer_seq]`:
the PostgreSQL roles that keep the audit trail out of the application's reach (docs/operations.md
"Audit trail: database roles and checkpoints").

- The owner owns the schema's tables, sequences and the audit triggers' functions, and runs `migrate`.
- The application role owns nothing, so it cannot ALTER a table, or DISABLE or DROP a trigger. It may
  read and write the application's tables, but on the audit tables only what the app needs: INSERT and
  SELECT on events, seals (a trigger checks each seal continues its chain), checkpoints and public keys,
  never UPDATE, DELETE or TRUNCATE; on chain heads the UPDATE of seq and hash (the trigger checks the
  hash is the one sealed at that seq); on the sequencer's queue (pending events) INSERT, SELECT and
  DELETE (a deleted pending row hides nothing: audit_verify reports the event it named).
- With `--sequencer`, a third role, the sequencer's (AUDIT_SEQUENCER_DATABASE_URL), alone inserts seals
  and moves chain heads: the application role then only reads seals and heads and only inserts pending
  rows, so it cannot put a seal of its own at the next seq. The sequencer role reads events, inserts
  seals, checkpoints and archived keys, deletes pending rows (and restores them after a crash emptied
  their UNLOGGED table) and moves heads; nothing else.

Run it connected as a superuser (or a role with CREATEROLE that owns the tables now). Idempotent: run it
again after each `migrate` (new tables get the owner's default privileges; this re-applies the audit
restrictions). It prints every statement it runs. The statements are audit/storage/roles.py's.
"""

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from audit.storage.roles import DatabaseRoles


class Command(BaseCommand):
    help = "Create or update the PostgreSQL owner and application roles (app: no audit changes)"

    def add_arguments(self, parser):
        parser.add_argument("--owner", required=True, help="the role that owns the tables and runs migrate")
        parser.add_argument("--app", required=True, help="the role the application connects as")
        parser.add_argument("--owner-password", default="", help="set the owner's password (LOGIN role)")
        parser.add_argument("--app-password", default="", help="set the application role's password")
        parser.add_argument(
            "--sequencer",
            default="",
            help="the audit sequencer's role (AUDIT_SEQUENCER_DATABASE_URL): alone may insert seals",
        )
        parser.add_argument("--sequencer-password", default="", help="set the sequencer role's password")
        parser.add_argument("--schema", default="public")

    def handle(
        self,
        *args,
        owner,
        app,
        owner_password,
        app_password,
        sequencer,
        sequencer_password,
        schema,
        **options,
    ):
        if connection.vendor != "postgresql":
            raise CommandError(
                "database roles are a PostgreSQL feature; this database is " + connection.vendor
            )
        if owner == app:
            raise CommandError("the owner and the application role must differ: that is the point")
        if sequencer in (owner, app):
            raise CommandError("the sequencer role must differ from the owner and the application role")
        DatabaseRoles(echo=self.stdout.write).apply(
            owner=owner,
            app=app,
            owner_password=owner_password,
            app_password=app_password,
            sequencer=sequencer,
            sequencer_password=sequencer_password,
            schema=schema,
        )
        self.stdout.write(
            self.style.SUCCESS(
                f"done: run `manage.py migrate` as {owner}, the application as {app}"
                + (f", the sequencer (AUDIT_SEQUENCER_DATABASE_URL) as {sequencer}" if sequencer else "")
                + " (and this command again after each migrate)"
            )
        )
