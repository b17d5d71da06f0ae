"""The intake quotas' state: one row per agent and one per tenant (agent null). Written only by
approvals/services/quotas.py, inside intake's transaction; approvals/models/__init__.py imports this
module, so the table is `approvals_quotastate`.

The limits themselves are configuration, on the Agent and the Tenant (`intake_burst`,
`intake_per_minute`, `open_proposals_max`; empty means the installation's default from settings).

Tenant ── QuotaState (agent null: the tenant's token bucket; the row every intake of the tenant locks)
       └─ QuotaState (per agent: its token bucket and its current throttle window)
"""

from django.db import models
from django.db.models import Q

from tenants.models import Tenant


class QuotaState(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    agent = models.OneToOneField(
        "approvals.Agent", null=True, blank=True, on_delete=models.CASCADE, related_name="quota_state"
    )
    # The token bucket: what was left at `refilled_at`; it refills at the limit's rate up to its burst.
    tokens = models.FloatField()
    refilled_at = models.DateTimeField()
    # The agent's current throttle window (QUOTA_AUDIT_WINDOW_SECONDS from its first refusal): which
    # limit refused it first, how many it refused, the last one. Null while it was never refused.
    throttled_at = models.DateTimeField(null=True, blank=True)
    throttled_limit = models.CharField(max_length=40, blank=True)
    refused = models.PositiveIntegerField(default=0)
    last_refused_at = models.DateTimeField(null=True, blank=True)
    # The agent's current window of requests intake refused as invalid, within its rate (the same
    # QUOTA_AUDIT_WINDOW_SECONDS from the first): its first is an `intake.refused` event, the rest only
    # counted here, and the count goes into the next window's event. Null while none was refused.
    invalid_at = models.DateTimeField(null=True, blank=True)
    invalid_refused = models.PositiveIntegerField(default=0)
    # How many of the owner's proposals wait for people, at most (services/quotas.py): intake adds the
    # ones it lets in, nothing takes away the ones decided, and a count sets it again. Null: unknown.
    open_at_most = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant"], condition=Q(agent__isnull=True), name="one_quota_state_per_tenant"
            ),
        ]
        indexes = [
            # The queue's banner: a tenant's agents refused lately.
            models.Index(fields=["tenant", "last_refused_at"], name="quota_refused_lately"),
        ]

    def __str__(self):
        return f"quota of agent {self.agent_id}" if self.agent_id else f"quota of tenant {self.tenant_id}"
