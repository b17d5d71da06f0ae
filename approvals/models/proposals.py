"""A proposal and what hangs off it: votes, the signed decision, the outbox to the agent, review notices."""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from approvals.models.agents import Agent, PolicyVersion
from approvals.models.risk import RANKS, Risk, rank
from approvals.states import WAITING_FOR_PEOPLE, State
from lib.agent_text import visible
from tenants.models import ApproverGroup, Tenant

# The rows that wait for people (states.WAITING_FOR_PEOPLE), as an index condition.
WAITING_CONDITION = Q(state__in=sorted(WAITING_FOR_PEOPLE))


class Proposal(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of their own: the composite indexes below lead with each (tenant: queue_by_urgency_risk,
    # history_by_target; agent: one_proposal_per_request), so every lookup by either reads one of them,
    # and an intake writes two index entries fewer (bench/README.md, "Intake's designs, measured").
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="proposals", db_index=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="proposals", db_index=False)
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
    # Claims a standard door adds to this proposal's decision token (oauth/: the OAuth Transaction
    # Authorization Challenge's `txn` and RFC 9396 `authorization_details`, CIBA's
    # `authorization_details`); {} for every other proposal. Names only from PROFILE_CLAIMS
    # (approvals/signing.py). A decision carrying them is always consumed online.
    token_claims = models.JSONField(default=dict, blank=True)
    supersedes = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="superseded_by"
    )
    # Who made this proposal by editing another (cannot approve it); null when the agent made it.
    # Indexed only where set (edited_proposals below): almost every proposal is the agent's own.
    edited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,
    )

    # What policy decided, pinned at intake.
    policy_versions = models.ManyToManyField(PolicyVersion, blank=True, related_name="proposals")
    # Merged requirements: {"thresholds": [...], "step_up": ..., "self_approval": bool, "consume": bool}
    requirements = models.JSONField(default=dict, blank=True)
    risk = models.CharField(max_length=20, blank=True)
    # rank(risk) (approvals/models/risk.py), kept by save() (the queue's order: expires_at, then
    # -risk_rank, then id).
    risk_rank = models.PositiveSmallIntegerField(default=RANKS[Risk.NOT_RATED], editable=False)
    # The tool and the thing it acts on ("payments.refund|order:1182"), for the history of the same target
    # (approvals/policy/history.py); "" when the action names no target.
    target_key = models.CharField(max_length=255, blank=True, default="")
    # R0 read-only .. R3 irreversible (approvals/policy/classification.py), fixed when policy is evaluated.
    reversibility = models.CharField(max_length=2, blank=True, default="")
    # A batch member's manifest (approvals/models/batches.py): the digest its decision names in the
    # `manifest` claim; "" for a proposal asked about alone.
    manifest_digest = models.CharField(max_length=80, blank=True, default="")

    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)
    executing_since = models.DateTimeField(null=True, blank=True)
    settled_at = models.DateTimeField(null=True, blank=True)
    transaction_id = models.CharField(max_length=200, blank=True)
    outcome_detail = models.CharField(max_length=1000, blank=True)
    compensation_note = models.TextField(blank=True)
    # The W3C traceparent of the intake span (lib/tracing.py): the vote, the decision, the delivery, the
    # consume and the outcome name it as their parent, so one action is one trace. Empty with traces off.
    trace_parent = models.CharField(max_length=55, blank=True, default="")

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
            # The open-proposal ceilings (approvals/services/quotas.py): what waits for people, counted;
            # by agent and id also the worker's turns through an agent's waiting requests (worker/loop.py).
            models.Index(fields=["agent", "id"], name="waiting_by_agent", condition=WAITING_CONDITION),
            models.Index(fields=["tenant"], name="waiting_by_tenant", condition=WAITING_CONDITION),
            # A person's edits (the PROTECT check before a user is deleted); null rows are not indexed.
            models.Index(
                fields=["edited_by"], name="edited_proposals", condition=models.Q(edited_by__isnull=False)
            ),
        ]

    def __str__(self):
        return f"{visible(self.tool)} ({self.state})"  # agent text: hidden characters as [U+202E]

    def save(self, *args, **kwargs):
        """Keeps risk_rank with risk, also when only "risk" is among update_fields (intake)."""
        self.risk_rank = rank(self.risk)
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
    # A delegate's vote (approvals/selectors/standins.py): the person whose eligibility it used.
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
    # What the factor itself attested, beside the method: a provider's confirmation has its acr and amr.
    auth_detail = models.JSONField(default=dict, blank=True)
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
