"""`manage.py setup_database_roles --owner reviewer_owner --app reviewer_app`: the two PostgreSQL roles
that keep the audit trail out of the application's reach (README "Audit trail: database roles and
checkpoints").

- The owner owns the schema's tables, sequences and the audit triggers' functions, and runs `migrate`.
- The application role owns nothing, so it cannot ALTER a table, or DISABLE or DROP a trigger. It may
  read and write the application's tables, but on the audit tables only what the app needs: INSERT and
  SELECT on events, seals (a trigger checks each seal continues its chain), checkpoints and public keys,
  never UPDATE, DELETE or TRUNCATE; on chain heads the UPDATE of seq and hash (the trigger checks the
  hash is the one sealed at that seq); on the sequencer's queue (pending events) INSERT, SELECT and
  DELETE (a deleted pending row hides nothing: audit_verify reports the event it named).

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
        parser.add_argument("--schema", default="public")

    def handle(self, *args, owner, app, owner_password, app_password, schema, **options):
        if connection.vendor != "postgresql":
            raise CommandError(
                "database roles are a PostgreSQL feature; this database is " + connection.vendor
            )
        if owner == app:
            raise CommandError("the owner and the application role must differ: that is the point")
        with transaction.atomic(), connection.cursor() as cursor:
            self.cursor = cursor
            for role, password in ((owner, owner_password), (app, app_password)):
                self._ensure_role(role, password)
            self._run("REVOKE {} FROM {}", sql.Identifier(owner), sql.Identifier(app))
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
            for table in tables:
                self._grant_app(schema, table, app)
            for sequence in sequences:
                self._run(
                    "GRANT USAGE, SELECT ON SEQUENCE {} TO {}",
                    sql.Identifier(schema, sequence),
                    sql.Identifier(app),
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
                f"done: run `manage.py migrate` as {owner}, the application as {app} "
                "(and this command again after each migrate)"
            )
        )

    def _grant_app(self, schema: str, table: str, app: str) -> None:
        target, role = sql.Identifier(schema, table), sql.Identifier(app)
        self._run("REVOKE ALL ON TABLE {} FROM {}", target, role)
        if table not in AUDIT_GRANTS:
            self._run("GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE {} TO {}", target, role)
            return
        privileges, columns = AUDIT_GRANTS[table]
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
