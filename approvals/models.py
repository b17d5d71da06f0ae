"""The approval domain. Rows here are written only by approvals/services/.

Tenant (tenants/models.py, with TenantMembership, ApproverGroup and GroupMembership)
        ├─ Agent (an A2A server, or a pull agent without a card URL; tokens stored hashed)
        ├─ Policy ── PolicyVersion (immutable; active after a second admin approves)
        └─ Proposal ─┬─ Vote
                     ├─ Decision (the signed token; one per proposal)
                     └─ OutboxMessage (continuations and cancels to the agent)
Halt: a kill switch for everything, a tenant, or an agent.
"""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from approvals.states import WAITING_FOR_PEOPLE, State
from lib.agent_text import visible
from tenants.models import ApproverGroup, Tenant


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
    api_token_hash = models.CharField(max_length=64, help_text="sha256 of its REST API bearer token")
    # How Reviewer authenticates when it calls the agent (continuations, cancels, GetTask).
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
        choices=[("", "not rated"), ("low", "low"), ("medium", "medium"), ("high", "high")],
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


# Risk as a number the queue sorts by (ties in expiry: the riskier first). "Not rated" counts as medium
# (nobody said it is low) and a label this list does not know as high: unknown risk sorts up, not down.
RISK_RANKS = {"high": 3, "medium": 2, "": 2, "low": 1}
UNKNOWN_RISK_RANK = 3


def risk_rank(risk: str) -> int:
    return RISK_RANKS.get((risk or "").strip().lower(), UNKNOWN_RISK_RANK)


# The rows that wait for people (states.WAITING_FOR_PEOPLE), as an index condition.
WAITING_CONDITION = Q(state__in=sorted(WAITING_FOR_PEOPLE))


class Proposal(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="proposals")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="proposals")
    task_id = models.CharField(max_length=200)
    context_id = models.CharField(max_length=200, blank=True)
    request_id = models.CharField(max_length=200)
    state = models.CharField(max_length=20, choices=State.choices, default=State.PROPOSED)
    # Bumped on every transition; a decision names the rev it was signed at (fencing).
    rev = models.PositiveIntegerField(default=1)

    # The request as the agent sent it (untrusted text, capped at intake).
    summary = models.CharField(max_length=500)
    action = models.JSONField()
    action_canonical = models.TextField(help_text="RFC 8785 form of action: what the digest covers")
    action_digest = models.CharField(max_length=80)
    tool = models.CharField(max_length=200)
    principal_id = models.CharField(max_length=200)
    principal_display = models.CharField(max_length=200, blank=True)
    agent_version = models.CharField(max_length=100, blank=True)
    consequences = models.JSONField(default=dict, blank=True)
    diff = models.JSONField(default=list, blank=True)
    evidence = models.JSONField(default=list, blank=True)
    supersedes = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="superseded_by"
    )
    # Who made this proposal by editing another (cannot approve it); null when the agent made it.
    edited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    # What policy decided, pinned at intake.
    policy_versions = models.ManyToManyField(PolicyVersion, blank=True, related_name="proposals")
    # Merged requirements: {"thresholds": [...], "step_up": ..., "self_approval": bool, "consume": bool}
    requirements = models.JSONField(default=dict, blank=True)
    risk = models.CharField(max_length=20, blank=True)
    # risk_rank(risk), kept by save() (the queue's order: expires_at, then -risk_rank, then id).
    risk_rank = models.PositiveSmallIntegerField(default=RISK_RANKS[""], editable=False)
    # The tool and the thing it acts on ("payments.refund|order:1182"), for the history of the same target
    # (approvals/policy/history.py); "" when the action names no target.
    target_key = models.CharField(max_length=255, blank=True, default="")
    # R0 read-only .. R3 irreversible (approvals/policy/classification.py), fixed when policy is evaluated.
    reversibility = models.CharField(max_length=2, blank=True, default="")

    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)
    executing_since = models.DateTimeField(null=True, blank=True)
    settled_at = models.DateTimeField(null=True, blank=True)
    transaction_id = models.CharField(max_length=200, blank=True)
    outcome_detail = models.CharField(max_length=1000, blank=True)
    compensation_note = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "task_id", "request_id"], name="one_proposal_per_request"
            ),
        ]
        indexes = [
            # The queue's filter and sort, read in order (approvals/web/queries.py keyset_page): one tenant
            # by (tenant, state, expires_at, -risk_rank, id); several tenants by the waiting rows' own
            # index. Ties in expiry: the riskier first.
            models.Index(
                fields=["tenant", "state", "expires_at", "-risk_rank", "id"], name="queue_by_urgency_risk"
            ),
            models.Index(
                fields=["expires_at", "-risk_rank", "id"],
                name="waiting_by_urgency_risk",
                condition=models.Q(state="awaiting_review"),
            ),
            models.Index(fields=["state", "expires_at"], name="sweep_by_expiry"),
            # The watching list, newest first, read backwards.
            models.Index(fields=["created_at", "id"], name="watching_by_recency"),
            models.Index(fields=["tenant", "target_key", "created_at"], name="history_by_target"),
            # The open-proposal ceilings (approvals/services/quotas.py): what waits for people, counted.
            models.Index(fields=["agent"], name="waiting_by_agent", condition=WAITING_CONDITION),
            models.Index(fields=["tenant"], name="waiting_by_tenant", condition=WAITING_CONDITION),
        ]

    def __str__(self):
        return f"{visible(self.tool)} ({self.state})"  # agent text: hidden characters as [U+202E]

    def save(self, *args, **kwargs):
        """Keeps risk_rank with risk, also when only "risk" is among update_fields (intake)."""
        self.risk_rank = risk_rank(self.risk)
        update_fields = kwargs.get("update_fields")
        if update_fields is not None and "risk" in update_fields and "risk_rank" not in update_fields:
            kwargs["update_fields"] = [*update_fields, "risk_rank"]
        super().save(*args, **kwargs)


class Vote(models.Model):
    class Verdict(models.TextChoices):
        APPROVE = "approve"
        REJECT = "reject"

    proposal = models.ForeignKey(Proposal, on_delete=models.PROTECT, related_name="votes")
    voter = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="votes")
    # A delegate's vote (approvals/standins.py): the person whose eligibility it used.
    on_behalf_of = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    verdict = models.CharField(max_length=10, choices=Verdict.choices)
    # The group slot this vote filled when it was cast (None for a reject or an unplaced approval).
    group = models.ForeignKey(ApproverGroup, null=True, blank=True, on_delete=models.PROTECT)
    digest_seen = models.CharField(max_length=80)
    page_hash = models.CharField(max_length=80, blank=True, help_text="sha256 of the page content shown")
    reason = models.TextField(blank=True)
    # A dissent that does not block (approve with reservation): in the signed decision and the audit trail.
    reservation = models.TextField(blank=True, default="")
    auth_method = models.CharField(max_length=30)
    auth_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["proposal", "voter"], name="one_vote_per_reviewer")]

    def __str__(self):
        return f"{self.voter} {self.verdict}s {self.proposal_id}"


class Decision(models.Model):
    """The signed decision for a proposal (approved, rejected or needs_info); one per proposal."""

    class Kind(models.TextChoices):
        APPROVED = "approved"
        REJECTED = "rejected"
        NEEDS_INFO = "needs_info"

    jti = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    proposal = models.OneToOneField(Proposal, on_delete=models.PROTECT, related_name="decision")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    reason = models.TextField(blank=True)
    token = models.TextField()
    kid = models.CharField(max_length=100)
    rev = models.PositiveIntegerField()
    consume_required = models.BooleanField(default=True)
    issued_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    consumed_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    revoke_reason = models.TextField(blank=True)

    def __str__(self):
        return f"{self.kind} decision {self.jti}"


class OutboxMessage(models.Model):
    """A message to an agent, written in the same transaction as the decision that caused it."""

    class Kind(models.TextChoices):
        CONTINUE = "continue"  # SendMessage with the decision
        CANCEL = "cancel"  # CancelTask
        GET_TASK = "get_task"  # reconciliation
        WEBHOOK = "webhook"  # a signed event to a tenant's endpoint (approvals/notify/webhook_sender.py)

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        DEAD = "dead"

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="outbox")
    proposal = models.ForeignKey(Proposal, on_delete=models.PROTECT, related_name="outbox")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    # Derived from the decision id, so a retry sends the same message and the agent sees it once.
    message_id = models.CharField(max_length=100)
    payload = models.JSONField(default=dict)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["kind", "message_id"], name="one_outbox_row_per_message")
        ]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="outbox_due")]

    def __str__(self):
        return f"{self.kind} {self.message_id} ({self.status})"


class ReviewNotice(models.Model):
    """A reviewer to be told by e-mail that a proposal waits for them (approvals/worker/notifications.py).

    Intake writes one row with no user in its own transaction (the proposal to announce); the worker
    fans it out to one row per eligible reviewer, then sends each reviewer one digest of their unsent
    rows at most every NOTIFICATION_DIGEST_SECONDS. No mail is sent inside a request."""

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="notices")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.CASCADE, related_name="review_notices"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)  # mailed, or dropped: it no longer waited

    class Meta:
        constraints = [models.UniqueConstraint(fields=["proposal", "user"], name="one_notice_per_reviewer")]
        indexes = [
            models.Index(fields=["user", "sent_at"], name="notices_by_reviewer"),
            models.Index(fields=["id"], condition=models.Q(user=None), name="notices_to_fan_out"),
        ]

    def __str__(self):
        return f"notice of {self.proposal_id} to {self.user_id or 'everyone eligible'}"


class Halt(models.Model):
    """The kill switch. Active while lifted_at is null; stored here so every process sees it."""

    class Scope(models.TextChoices):
        GLOBAL = "global"
        TENANT = "tenant"
        AGENT = "agent"

    scope = models.CharField(max_length=10, choices=Scope.choices)
    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.CASCADE)
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.CASCADE)
    reason = models.TextField()
    operator = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    lifted_at = models.DateTimeField(null=True, blank=True)
    lifted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # Not a column: what halt() stopped, set on the halt it returns for its caller's report.
    stopped: list["Proposal"]

    def __str__(self):
        target = self.tenant or self.agent or "everything"
        return f"halt of {target}"


class BreakGlassRelease(models.Model):
    """One emergency single-approver release (approvals/services/break_glass.py): who, why, with which
    step-up, what amount. Counted against the releaser's weekly budget in the tenant."""

    proposal = models.OneToOneField(Proposal, on_delete=models.PROTECT, related_name="break_glass")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    releaser = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    reason = models.TextField()
    step_up_method = models.CharField(max_length=30)
    step_up_at = models.DateTimeField()
    amount = models.CharField(max_length=40)
    currency = models.CharField(max_length=10)
    reviews_due_at = models.DateTimeField()
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["tenant", "releaser", "created_at"], name="break_glass_budget")]

    def __str__(self):
        return f"break-glass release of {self.proposal_id}"


class PostHocReview(models.Model):
    """A mandatory review of a break-glass release by another person, in their queue until done."""

    class Verdict(models.TextChoices):
        AGREE = "agree"
        DISAGREE = "disagree"

    release = models.ForeignKey(BreakGlassRelease, on_delete=models.PROTECT, related_name="reviews")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="post_hoc_reviews"
    )
    due_at = models.DateTimeField()
    verdict = models.CharField(max_length=10, choices=Verdict.choices, blank=True)
    note = models.TextField(blank=True)
    done_at = models.DateTimeField(null=True, blank=True)
    # When the worker recorded that it went past its deadline undone (once).
    overdue_noted_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["release", "reviewer"], name="one_post_hoc_review_per_person")
        ]
        indexes = [
            models.Index(fields=["reviewer", "done_at", "due_at"], name="post_hoc_by_reviewer"),
            models.Index(fields=["tenant", "done_at", "due_at"], name="post_hoc_open_by_tenant"),
        ]

    def __str__(self):
        return f"post-hoc review of {self.release.proposal_id} by {self.reviewer_id}"

    @property
    def done(self) -> bool:
        return self.done_at is not None


# Reminders, escalation, delegation and Slack: their models live with the code that uses them.
from approvals.notification_models import (  # noqa: E402, F401
    Delegation,
    FollowUp,
    PushSent,
    PushSubscription,
    SlackIdentity,
    SlackLinkRequest,
    SlackPost,
    SlackRequestSeen,
    SlackWorkspace,
    StandIn,
    TeamsChannel,
    TeamsPost,
    WebhookEndpoint,
)

# The intake quotas' state (approvals/services/quotas.py).
from approvals.quota_models import QuotaState  # noqa: E402, F401
