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
restrictions). It prints every statement it runs.
"""

from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from psycopg import sql

# What the application role may do on each audit table; every other table gets full read and write.
AUDIT_GRANTS = {
    "audit_auditevent": ("SELECT, INSERT", ()),
    "audit_auditseal": ("SELECT, INSERT", ()),
    "audit_auditpending": ("SELECT, INSERT, DELETE", ()),
    # The pending rows are complete (the sequencer restores them when the mark is missing): never DELETE,
    # so the role cannot ask for the restore's scan of the trail.
    "audit_auditpendingmark": ("SELECT, INSERT", ()),
    "audit_chainhead": ("SELECT, INSERT", ("seq", "hash")),
    "audit_checkpoint": ("SELECT, INSERT", ()),
    "audit_publickey": ("SELECT, INSERT", ()),
}
# With a sequencer role, sealing is the sequencer's alone.
APP_GRANTS_WITH_SEQUENCER = {
    **AUDIT_GRANTS,
    "audit_auditseal": ("SELECT", ()),
    "audit_auditpending": ("SELECT, INSERT", ()),
    "audit_auditpendingmark": ("SELECT", ()),
    "audit_chainhead": ("SELECT", ()),
}
SEQUENCER_GRANTS = {
    "audit_auditevent": ("SELECT", ()),
    "audit_auditseal": ("SELECT, INSERT", ()),
    # INSERT: the pending rows a crash emptied, restored from the events (audit/chain/lost_pending.py).
    "audit_auditpending": ("SELECT, INSERT, DELETE", ()),
    "audit_auditpendingmark": ("SELECT, INSERT", ()),
    "audit_chainhead": ("SELECT, INSERT", ("seq", "hash")),
    "audit_checkpoint": ("SELECT, INSERT", ()),
    "audit_publickey": ("SELECT, INSERT", ()),
}
AUDIT_FUNCTIONS = (
    "audit_refuse_change()",
    "audit_seal_once()",  # before migration 0006
    "audit_seal_check()",
    "audit_head_check()",
)


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
        roles = [(owner, owner_password), (app, app_password)] + (
            [(sequencer, sequencer_password)] if sequencer else []
        )
        with transaction.atomic(), connection.cursor() as cursor:
            self.cursor = cursor
            for role, password in roles:
                self._ensure_role(role, password)
            for member in [app] + ([sequencer] if sequencer else []):
                self._run("REVOKE {} FROM {}", sql.Identifier(owner), sql.Identifier(member))
            if sequencer:
                self._run("REVOKE {} FROM {}", sql.Identifier(sequencer), sql.Identifier(app))
                self._run("REVOKE {} FROM {}", sql.Identifier(app), sql.Identifier(sequencer))
            self._run("GRANT USAGE, CREATE ON SCHEMA {} TO {}", sql.Identifier(schema), sql.Identifier(owner))
            self._run("GRANT USAGE ON SCHEMA {} TO {}", sql.Identifier(schema), sql.Identifier(app))
            self._run("REVOKE CREATE ON SCHEMA {} FROM {}", sql.Identifier(schema), sql.Identifier(app))
            tables = self._names("SELECT tablename FROM pg_tables WHERE schemaname = %s", schema)
            sequences = self._names("SELECT sequencename FROM pg_sequences WHERE schemaname = %s", schema)
            for name in tables + sequences:
                kind = "TABLE" if name in tables else "SEQUENCE"
                self._run(
                    f"ALTER {kind} {{}} OWNER TO {{}}", sql.Identifier(schema, name), sql.Identifier(owner)
                )
            for function in AUDIT_FUNCTIONS:
                if self._exists("SELECT to_regprocedure(%s) IS NOT NULL", f"{schema}.{function}"):
                    self._run(f"ALTER FUNCTION {schema}.{function} OWNER TO {{}}", sql.Identifier(owner))
            app_grants = APP_GRANTS_WITH_SEQUENCER if sequencer else AUDIT_GRANTS
            for table in tables:
                self._grant(schema, table, app, app_grants, everything_else=True)
                if sequencer:
                    self._grant(schema, table, sequencer, SEQUENCER_GRANTS, everything_else=False)
            for sequence in sequences:
                for role in [app] + ([sequencer] if sequencer else []):
                    self._run(
                        "GRANT USAGE, SELECT ON SEQUENCE {} TO {}",
                        sql.Identifier(schema, sequence),
                        sql.Identifier(role),
                    )
            if sequencer:
                self._run("GRANT USAGE ON SCHEMA {} TO {}", sql.Identifier(schema), sql.Identifier(sequencer))
                self._run(
                    "REVOKE CREATE ON SCHEMA {} FROM {}", sql.Identifier(schema), sql.Identifier(sequencer)
                )
            # Tables a later migration creates: the app may use them (re-run this for audit tables).
            self._run(
                "ALTER DEFAULT PRIVILEGES FOR ROLE {} IN SCHEMA {} GRANT SELECT, INSERT, UPDATE, DELETE "
                "ON TABLES TO {}",
                sql.Identifier(owner),
                sql.Identifier(schema),
                sql.Identifier(app),
            )
            self._run(
                "ALTER DEFAULT PRIVILEGES FOR ROLE {} IN SCHEMA {} GRANT USAGE, SELECT ON SEQUENCES TO {}",
                sql.Identifier(owner),
                sql.Identifier(schema),
                sql.Identifier(app),
            )
        self.stdout.write(
            self.style.SUCCESS(
                f"done: run `manage.py migrate` as {owner}, the application as {app}"
                + (f", the sequencer (AUDIT_SEQUENCER_DATABASE_URL) as {sequencer}" if sequencer else "")
                + " (and this command again after each migrate)"
            )
        )

    def _grant(self, schema: str, table: str, name: str, grants: dict, *, everything_else: bool) -> None:
        """`grants` on the audit tables; on every other table full read and write (the application) or
        nothing (the sequencer)."""
        target, role = sql.Identifier(schema, table), sql.Identifier(name)
        self._run("REVOKE ALL ON TABLE {} FROM {}", target, role)
        if table not in grants:
            if everything_else:
                self._run("GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE {} TO {}", target, role)
            return
        privileges, columns = grants[table]
        self._run(f"GRANT {privileges} ON TABLE {{}} TO {{}}", target, role)
        if columns:
            self._run(
                "GRANT UPDATE ({}) ON TABLE {} TO {}",
                sql.SQL(", ").join(map(sql.Identifier, columns)),
                target,
                role,
            )

    def _ensure_role(self, role: str, password: str) -> None:
        if not self._exists("SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %s)", role):
            self._run("CREATE ROLE {} LOGIN", sql.Identifier(role))
        # Neither role may bypass the triggers or row security, or create roles and databases.
        self._run(
            "ALTER ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS NOREPLICATION",
            sql.Identifier(role),
        )
        if password:
            statement = sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(password)
            )
            self.cursor.execute(statement.as_string(self.cursor.connection))
            self.stdout.write(f"ALTER ROLE {role} PASSWORD '...'")

    def _run(self, template: str, *parts) -> None:
        statement = sql.SQL(template).format(*parts).as_string(self.cursor.connection)
        self.cursor.execute(statement)
        self.stdout.write(statement)

    def _names(self, query: str, *params) -> list[str]:
        self.cursor.execute(query, params)
        return sorted(row[0] for row in self.cursor.fetchall())

    def _exists(self, query: str, *params) -> bool:
        self.cursor.execute(query, params)
        return bool(self.cursor.fetchone()[0])
