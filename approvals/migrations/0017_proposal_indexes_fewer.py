"""Three single-column indexes of approvals_proposal fewer: tenant_id and agent_id lead composite
indexes every lookup by them reads (queue_by_urgency_risk and history_by_target; one_proposal_per_request
and waiting_by_agent), and edited_by_id, null on almost every row, is indexed only where set
(edited_proposals). Only the indexes change: the foreign keys' constraints stay as they are (Django's
AlterField would drop and re-add them, validating every row of a large table again)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# The indexes Django made for the three foreign keys (their names are the same on SQLite).
DROPPED = {
    "approvals_proposal_tenant_id_493ebee3": "tenant_id",
    "approvals_proposal_agent_id_47d3955f": "agent_id",
    "approvals_proposal_edited_by_id_6b5747f8": "edited_by_id",
}


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0016_proposal_token_claims"),
        ("tenants", "0002_intake_quotas"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="proposal",
                    name="agent",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="proposals",
                        to="approvals.agent",
                    ),
                ),
                migrations.AlterField(
                    model_name="proposal",
                    name="edited_by",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                migrations.AlterField(
                    model_name="proposal",
                    name="tenant",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="proposals",
                        to="tenants.tenant",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{name}"',
                    reverse_sql=f'CREATE INDEX "{name}" ON "approvals_proposal" ("{column}")',
                )
                for name, column in DROPPED.items()
            ],
        ),
        migrations.AddIndex(
            model_name="proposal",
            index=models.Index(
                condition=models.Q(("edited_by__isnull", False)),
                fields=["edited_by"],
                name="edited_proposals",
            ),
        ),
    ]
