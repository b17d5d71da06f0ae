"""The kill switch, and break-glass releases with their post-hoc reviews."""

from django.conf import settings
from django.db import models

from approvals.models.agents import Agent
from approvals.models.proposals import Proposal
from tenants.models import Tenant


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
