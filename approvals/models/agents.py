"""Agents and the policies that decide their proposals (PolicyVersion: immutable once active)."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from approvals.models.risk import Risk
from tenants.models import Tenant


class Agent(models.Model):
    class AuthScheme(models.TextChoices):
        NONE = "none", "No authentication"
        BEARER = "bearer", "Bearer token"

    class Delivery(models.TextChoices):
        # An A2A server: Reviewer continues, cancels, reconciles and lists its tasks at its card URL.
        A2A = "a2a", "A2A continuation"
        # Not an A2A server (MCP gateway, LangGraph, a script): no card URL, and Reviewer never calls it;
        # it reads its decisions from the intake answer or the decision pull.
        PULL = "pull", "Pull (no card URL)"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="agents")
    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    card_url = models.URLField(
        blank=True,
        help_text="The agent card URL, e.g. http://127.0.0.1:8001/.well-known/agent-card.json; "
        "empty for an agent that is not an A2A server (it pulls its decisions)",
    )
    delivery = models.CharField(
        max_length=10,
        choices=Delivery.choices,
        default=Delivery.A2A,
        help_text="how the agent gets its decisions: pull exactly when it has no card URL",
    )
    audience = models.CharField(max_length=500, help_text="The `aud` of this agent's decisions.")
    push_token_hash = models.CharField(max_length=64, help_text="sha256 of the token its pushes carry")
    api_token_hash = models.CharField(
        max_length=64, db_index=True, help_text="sha256 of its REST API bearer token"
    )

    class ApprovalExtension(models.TextChoices):
        # Reviewer's own A2A extension, urn:reviewer:a2a:approval:v1 (docs/agents/a2a-extension.md).
        REVIEWER = "reviewer", "Reviewer (urn:reviewer:a2a:approval:v1)"
        # a2a-rust's, https://a2a-rust.com/extensions/approval/v1: Reviewer is the agent's approver
        # (approvals/a2a/rust_approval.py, docs/agents/a2a-rust.md).
        A2A_RUST = "a2a-rust", "a2a-rust (https://a2a-rust.com/extensions/approval/v1)"

    approval_extension = models.CharField(
        max_length=20,
        choices=ApprovalExtension.choices,
        default=ApprovalExtension.REVIEWER,
        help_text="the A2A approval extension the agent speaks: where its requests are read and how "
        "its decisions are sent",
    )
    # How Reviewer authenticates when it calls the agent (continuations, cancels, GetTask). For an
    # a2a-rust agent this is the approver identity its ApprovalGate accepts.
    outbound_auth_scheme = models.CharField(
        max_length=20, choices=AuthScheme.choices, default=AuthScheme.NONE
    )
    outbound_auth_credentials = models.CharField(max_length=500, blank=True)
    # Intake quotas (approvals/services/quotas.py); empty: the installation's default (settings).
    intake_burst = models.PositiveIntegerField(
        null=True, blank=True, help_text="proposals it may send at once; empty: AGENT_INTAKE_BURST"
    )
    intake_per_minute = models.PositiveIntegerField(
        null=True, blank=True, help_text="its sustained rate; empty: AGENT_INTAKE_PER_MINUTE"
    )
    open_proposals_max = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="its proposals waiting for people at most; empty: AGENT_OPEN_PROPOSALS",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        # An agent's card URL and audience are its own across all tenants (approvals/services/agents.py
        # also refuses spelling variants of them).
        constraints = [
            # Pull agents have no card URL (""): only card URLs that exist are unique.
            models.UniqueConstraint(
                fields=["card_url"], condition=~Q(card_url=""), name="agent_card_url_unique"
            ),
            models.UniqueConstraint(fields=["audience"], name="agent_audience_unique"),
            models.CheckConstraint(
                condition=Q(delivery="pull", card_url="") | (Q(delivery="a2a") & ~Q(card_url="")),
                name="agent_delivery_matches_card_url",
            ),
        ]

    def __str__(self):
        return self.slug

    @property
    def is_pull(self) -> bool:
        return self.delivery == self.Delivery.PULL


class Policy(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="policies")
    slug = models.SlugField()
    name = models.CharField(max_length=200)

    class Meta:
        verbose_name_plural = "policies"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "slug"], name="policy_slug_unique_per_tenant")
        ]

    def __str__(self):
        return f"{self.tenant.slug}/{self.slug}"

    @property
    def active_version(self):
        return self.versions.filter(status=PolicyVersion.Status.ACTIVE).first()


class PolicyVersion(models.Model):
    """One immutable version of a policy. Editing creates a new version (a draft)."""

    class Status(models.TextChoices):
        DRAFT = "draft"
        ACTIVE = "active"
        RETIRED = "retired"

    class Outcome(models.TextChoices):
        ALLOW = "allow"
        DENY = "deny"
        REQUIRE_APPROVAL = "require_approval"

    policy = models.ForeignKey(Policy, on_delete=models.PROTECT, related_name="versions")
    version = models.PositiveIntegerField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.DRAFT)
    agent_pattern = models.CharField(max_length=100, default="*", help_text="agent slug glob")
    tool_pattern = models.CharField(max_length=200, default="*", help_text="tool name glob, e.g. payments.*")
    condition = models.TextField(blank=True, help_text="CEL over tool, args, principal, agent, consequences")
    outcome = models.CharField(max_length=20, choices=Outcome.choices)
    # [{"group": "<group slug>", "count": N}, ...]: all must be met.
    thresholds = models.JSONField(default=list, blank=True)
    # "per_vote", or a freshness window in seconds written as a number.
    step_up = models.CharField(max_length=20, default="per_vote")
    ttl_seconds = models.PositiveIntegerField("TTL (seconds)", default=3600)
    allow_self_approval = models.BooleanField(default=False)
    consume_online = models.BooleanField(default=True, help_text="the agent must consume the decision online")
    risk = models.CharField(
        max_length=20,
        blank=True,
        choices=Risk.choices,
        help_text="label shown in the queue and on the proposal page",
    )
    reservation_needs_second = models.BooleanField(
        default=False,
        help_text="an approval with a reservation asks for one more approval from the same group",
    )
    reversibility = models.CharField(
        max_length=2,
        blank=True,
        choices=[
            ("R0", "R0 read-only"),
            ("R1", "R1 reversible"),
            ("R2", "R2 reversible with cost"),
            ("R3", "R3 irreversible"),
        ],
        help_text="the admins' classification of the tools this version's patterns match (the strictest of "
        "this and the agent's statement counts; unclassified counts as R2)",
    )
    # The admins' classification of a target (approvals/policy/history.py): the argument that names what
    # the matched tools act on, and tools that act alike (a refund and a credit of one order share its
    # history and its duplicate warning).
    target_argument = models.CharField(
        max_length=100,
        blank=True,
        help_text="the argument that names what the matched tools act on (e.g. order_id); empty: the "
        "action's target, else the first key argument",
    )
    equivalent_tools = models.JSONField(
        default=list,
        blank=True,
        help_text='tools that act alike and share one history, e.g. ["payments.refund", "payments.credit"]',
    )
    # Budgeted break-glass (approvals/policy/break_glass.py): {} for none, else {"people": [usernames],
    # "per_week": N, "amount_cap": "500.00", "currency": "EUR", "review_hours": 24}.
    break_glass = models.JSONField(
        default=dict,
        blank=True,
        help_text="emergency single-approver release for named people under a weekly budget and an "
        "amount cap; each use needs two post-hoc reviews by other people",
    )
    # Batches (approvals/policy/batching.py): {} for never batched, else {"max_members": N, "max_total":
    # {"EUR": "1000.00"}, "partial": bool, "irreversible": bool, "break_glass": bool}.
    batch = models.JSONField(
        default=dict,
        blank=True,
        help_text="whether the matched tools may be asked about in a batch decided on one page, up to how "
        "many members and what total per currency, and whether a subset may be approved",
    )
    # Chasing and chat (approvals/policy/notifications.py): {} for none, else {"reminders": [50, 80]
    # (percent of the TTL), "escalation": {"before_expiry_seconds": N, "group": "<slug>"} or {..., "people":
    # [usernames]}, "at_expiry": "expire_closed" | "expire_closed_tell_admins", "chat_decisions": bool}.
    notifications = models.JSONField(
        default=dict,
        blank=True,
        help_text="reminders, an escalation step, what happens at expiry, and whether chat may decide",
    )
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    activated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    activated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["policy", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["policy", "version"], name="policy_version_unique"),
            models.UniqueConstraint(
                fields=["policy"], condition=Q(status="active"), name="one_active_version_per_policy"
            ),
        ]

    def __str__(self):
        return f"{self.policy}@{self.version}"

    @property
    def ref(self) -> dict:
        return {"id": self.policy.slug, "version": self.version}
