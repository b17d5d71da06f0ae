"""A batch: several proposals an agent asks about at once, decided on one page against one fixed
manifest (docs/agents/batches.md).

The manifest is the ordered list of the members still in the batch; its digest
(approvals/batching.py `manifest_digest`) is what a reviewer's vote names. Each member is an ordinary
Proposal with its own action, digest, votes and signed decision; the decision names the manifest digest
it was approved under (`Proposal.manifest_digest`, the token's `manifest` claim)."""

import uuid

from django.conf import settings
from django.db import models

from approvals.models.agents import Agent
from approvals.models.proposals import Proposal
from tenants.models import Tenant


class Batch(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="batches")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="batches")
    task_id = models.CharField(max_length=200)
    context_id = models.CharField(max_length=200, blank=True)
    # The agent's own name for the batch: a retry with the same manifest answers the stored batch.
    batch_id = models.CharField(max_length=200)
    summary = models.CharField(max_length=500, blank=True)
    # The digest of the members in the batch now (withdrawn and excluded members left it).
    manifest_digest = models.CharField(max_length=80)
    # The digest the agent submitted: the manifest it asked about, kept when the membership changes.
    submitted_digest = models.CharField(max_length=80)
    # The policy's batch rule merged over every member's versions (approvals/policy/batching.py), pinned
    # at intake: whether a subset may be approved, the size and total limits.
    rule = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    revoke_reason = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "task_id", "batch_id"], name="one_batch_per_request")
        ]

    def __str__(self) -> str:
        return f"batch {self.batch_id} ({self.manifest_digest[:15]})"


class BatchMember(models.Model):
    class Standing(models.TextChoices):
        IN = "in"  # in the manifest
        WITHDRAWN = "withdrawn"  # the agent took it out before the decision
        EXCLUDED = "excluded"  # a reviewer approved a subset without it (it was rejected)

    batch = models.ForeignKey(Batch, on_delete=models.PROTECT, related_name="members")
    proposal = models.OneToOneField(Proposal, on_delete=models.PROTECT, related_name="batch_member")
    position = models.PositiveIntegerField()
    standing = models.CharField(max_length=10, choices=Standing.choices, default=Standing.IN)

    class Meta:
        ordering = ["batch", "position"]
        constraints = [models.UniqueConstraint(fields=["batch", "position"], name="one_member_per_position")]

    def __str__(self) -> str:
        return f"member {self.position} of {self.batch_id} ({self.standing})"
