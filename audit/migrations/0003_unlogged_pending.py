"""The sequencer's queue (pending rows) and its mark UNLOGGED on PostgreSQL: hints the trail implies,
kept out of the WAL every append waits for (audit/models.py AuditPending). SET UNLOGGED rewrites the
table under an ACCESS EXCLUSIVE lock: the pending table is small, and appends wait for the moment."""

from django.db import migrations, models

TABLES = ("audit_auditpending", "audit_auditpendingmark")


def _set(persistence: str):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return  # elsewhere every table is logged; the mark simply never goes missing
        for table in TABLES:
            schema_editor.execute(f"ALTER TABLE {schema_editor.quote_name(table)} SET {persistence}")

    return run


class Migration(migrations.Migration):
    dependencies = [("audit", "0002_person_directory")]

    operations = [
        migrations.CreateModel(
            name="AuditPendingMark",
            fields=[("id", models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False))],
        ),
        migrations.RunPython(_set("UNLOGGED"), _set("LOGGED")),
    ]
