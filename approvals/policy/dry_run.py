"""The dry run of a draft policy version: the tenant's recent proposals replayed against it, read only."""

from dataclasses import dataclass, field

from approvals.models import PolicyVersion, Proposal
from approvals.policy.evaluation import (
    Evaluation,
    PolicyConditionError,
    active_versions_for,
    condition_matches,
    context_for_proposal,
    evaluate,
    pattern_matches,
)
from approvals.policy.headline import action_headline
from tenants.models import Tenant

# ---------------------------------------------------------------------------------------------------
# Dry run: replay recent proposals against a draft


@dataclass
class DryRunRow:
    proposal: Proposal
    draft_matches: bool
    draft_error: str
    outcome_now: str  # with the active versions
    outcome_with_draft: str  # with the draft in place of its policy's active version
    evaluation: Evaluation
    thresholds_now: list = field(default_factory=list)  # the approvals required with the active versions

    @property
    def headline(self) -> str:
        """What the proposal does, from its action (approvals/policy/headline.py): an edited proposal's
        agent summary describes the request before the edit, so the dry run names the action instead."""
        return action_headline(self.proposal.action, self.proposal.consequences).text

    @property
    def changes(self) -> bool:
        """A different outcome, or the same "require approval" with other required approvals."""
        return self.outcome_now != self.outcome_with_draft or (
            self.outcome_now == "require_approval" and self.thresholds_now != self.evaluation.thresholds
        )


def versions_with_draft(active: list[PolicyVersion], draft: PolicyVersion) -> list[PolicyVersion]:
    return [v for v in active if v.policy_id != draft.policy_id] + [draft]


def draft_matches(draft: PolicyVersion, context: dict) -> tuple[bool, str]:
    """Whether the draft by itself matches; a condition error matches for deny/approval, as at intake."""
    if not pattern_matches(draft, context["agent"], context["tool"]):
        return False, ""
    try:
        return condition_matches(draft.condition, context), ""
    except PolicyConditionError as error:
        return draft.outcome != PolicyVersion.Outcome.ALLOW, str(error)


def dry_run(draft: PolicyVersion, proposals) -> list[DryRunRow]:
    """Evaluate each proposal as intake would have if the draft were active (nothing is written)."""
    tenant = draft.policy.tenant
    active = active_versions_for(tenant)
    candidate = versions_with_draft(active, draft)
    rows = []
    for proposal in proposals:
        context = context_for_proposal(proposal)
        matches, error = draft_matches(draft, context)
        with_draft = evaluate(tenant, candidate, context)
        now = evaluate(tenant, active, context)
        rows.append(
            DryRunRow(
                proposal=proposal,
                draft_matches=matches,
                draft_error=error,
                outcome_now=now.outcome,
                outcome_with_draft=with_draft.outcome,
                evaluation=with_draft,
                thresholds_now=now.thresholds,
            )
        )
    return rows


def recent_proposals(tenant: Tenant, limit: int = 100) -> list[Proposal]:
    recent = Proposal.objects.filter(tenant=tenant).select_related("agent").order_by("-created_at")
    return list(recent[:limit])
