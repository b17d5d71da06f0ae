"""Standing grants: people approve once, ahead of time, a narrow and bounded class of later calls.

A grant is asked for as a proposal of the reserved tool `reviewer.grant` (approvals/policy/grants.py
reads its terms from the arguments), so it is voted on like any proposal: policy, quorum, a fresh
factor, reasons. Written only by approvals/services/grants.py.

Proposal (tool reviewer.grant) ── Grant ─┬─ GrantUse  (one per call it decided: the call's proposal)
                                         └─ GrantMiss (a call that matched its tool but did not fit, and why)

A grant's state (`Grant.State`, `GRANT_ALLOWED`):

    proposed ── approved ──> active ──> revoked  (a person, with a reason)
        │                       └────> lapsed   (its expiry passed: never renewed silently)
        └── rejected, denied, asked, expired ──> declined
"""

import uuid

from django.conf import settings
from django.db import models

from approvals.models.agents import Agent
from approvals.models.proposals import Proposal
from tenants.models import Tenant


class Grant(models.Model):
    class State(models.TextChoices):
        PROPOSED = "proposed"
        ACTIVE = "active"
        DECLINED = "declined"
        REVOKED = "revoked"
        LAPSED = "lapsed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    # The request people voted on; its agent is the only agent the grant covers.
    proposal = models.OneToOneField(Proposal, on_delete=models.PROTECT, related_name="grant")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="grants")
    state = models.CharField(max_length=10, choices=State.choices, default=State.PROPOSED)

    # The terms (approvals/policy/grants.py `GrantTerms`), fixed when it is asked for.
    principal_id = models.CharField(max_length=200, help_text='the principal it covers; "*": any')
    tool_pattern = models.CharField(max_length=200)
    condition = models.TextField(blank=True, help_text="CEL over the call, as a policy condition")
    not_before = models.DateTimeField(null=True, blank=True, help_text="empty: from its approval")
    expires_at = models.DateTimeField()
    max_uses = models.PositiveIntegerField()
    # {"EUR": "600.00"}: the most all its calls may move together, per currency; {}: no amount cap.
    max_amount = models.JSONField(default=dict, blank=True)
    environment = models.CharField(max_length=100, blank=True)
    data_class = models.CharField(max_length=100, blank=True)

    # What was spent: changed only under the row's lock (services/grants.py).
    uses = models.PositiveIntegerField(default=0)
    spent = models.JSONField(default=dict, blank=True)  # {"EUR": "575.00"}

    created_at = models.DateTimeField(auto_now_add=True)
    activated_at = models.DateTimeField(null=True, blank=True)
    approved_by = models.JSONField(default=list, blank=True)  # the approvers' subs ("person:<id>")
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    end_reason = models.TextField(blank=True)
    renewal_asked_at = models.DateTimeField(null=True, blank=True)
    # The grant a renewal was asked for from (its approvers voted on a new proposal with the same terms).
    renews = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="+")

    class Meta:
        indexes = [
            # Intake's read: an agent's grants in force (services/grants.py `plan_grant`).
            models.Index(fields=["agent", "state", "expires_at"], name="grants_by_agent"),
            models.Index(fields=["tenant", "state", "expires_at"], name="grants_by_tenant"),
        ]

    def __str__(self) -> str:
        return f"grant {self.id} ({self.state})"


class GrantUse(models.Model):
    """A call the grant decided: what it spent and what was left after it."""

    grant = models.ForeignKey(Grant, on_delete=models.PROTECT, related_name="uses_made")
    proposal = models.OneToOneField(Proposal, on_delete=models.PROTECT, related_name="grant_use")
    currency = models.CharField(max_length=3, blank=True)
    amount = models.DecimalField(max_digits=16, decimal_places=4, null=True, blank=True)
    uses_left = models.PositiveIntegerField()
    amount_left = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"use of {self.grant_id} by {self.proposal_id}"


class GrantMiss(models.Model):
    """A call that went to people although a grant names its tool: which grant, and why it did not fit."""

    grant = models.ForeignKey(Grant, on_delete=models.CASCADE, related_name="misses")
    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="grant_misses")
    reason = models.CharField(max_length=300)

    def __str__(self) -> str:
        return f"{self.proposal_id} did not fit {self.grant_id}"
