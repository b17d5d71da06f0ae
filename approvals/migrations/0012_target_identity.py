from collections import defaultdict

from django.db import migrations, models


def re_key_targets(apps, schema_editor):
    """Existing proposals are keyed by what they act on, not by the agent's spelling (the REST agent's
    `order_id=1182` and the A2A agent's `order:1182` become one target), with the admins' active
    classification of the day (none yet on a database this migration finds)."""
    from approvals.policy.evaluation import classified_target_key

    Proposal = apps.get_model("approvals", "Proposal")
    PolicyVersion = apps.get_model("approvals", "PolicyVersion")
    versions = defaultdict(list)
    for version in PolicyVersion.objects.filter(status="active").select_related("policy"):
        versions[version.policy.tenant_id].append(version)
    rows = Proposal.objects.select_related("agent").only(
        "pk", "action", "target_key", "tenant_id", "agent__slug"
    )
    for proposal in rows.iterator(chunk_size=2000):
        key = classified_target_key(proposal.action or {}, proposal.agent.slug, versions[proposal.tenant_id])
        if key != proposal.target_key:
            Proposal.objects.filter(pk=proposal.pk).update(target_key=key)


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0011_agent_identity_unique"),
    ]

    operations = [
        migrations.AddField(
            model_name="policyversion",
            name="target_argument",
            field=models.CharField(
                blank=True,
                help_text="the argument that names what the matched tools act on (e.g. order_id); empty: the "
                "action's target, else the first key argument",
                max_length=100,
            ),
        ),
        migrations.AddField(
            model_name="policyversion",
            name="equivalent_tools",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text='tools that act alike and share one history, e.g. ["payments.refund", "payments.credit"]',
            ),
        ),
        migrations.RunPython(re_key_targets, migrations.RunPython.noop),
    ]
