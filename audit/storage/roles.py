"""The PostgreSQL roles that keep the audit trail out of the application's reach: every statement of
`manage.py setup_database_roles` (audit/management/commands/setup_database_roles.py says what each role
may do, and docs/operations.md "Audit trail: database roles and checkpoints" when to run it). Role and
privilege statements have no ORM form; each is composed with psycopg's `sql` module (identifiers quoted,
a password as a literal) and echoed, passwords left out."""

from collections.abc import Callable

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


class DatabaseRoles:
    """Applies the roles' grants through one cursor, in one transaction, echoing each statement."""

    def __init__(self, echo: Callable[[str], object]):
        self.echo = echo

    def apply(
        self,
        *,
        owner: str,
        app: str,
        owner_password: str,
        app_password: str,
        sequencer: str,
        sequencer_password: str,
        schema: str,
    ) -> None:
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
            self.echo(f"ALTER ROLE {role} PASSWORD '...'")

    def _run(self, template: str, *parts) -> None:
        statement = sql.SQL(template).format(*parts).as_string(self.cursor.connection)
        self.cursor.execute(statement)
        self.echo(statement)

    def _names(self, query: str, *params) -> list[str]:
        self.cursor.execute(query, params)
        return sorted(row[0] for row in self.cursor.fetchall())

    def _exists(self, query: str, *params) -> bool:
        self.cursor.execute(query, params)
        return bool(self.cursor.fetchone()[0])
