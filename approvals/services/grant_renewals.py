"""Renewing a standing grant: one of its approvers (or a tenant admin) asks for the same terms for the
next window, as a new grant request the approvers vote on as usual. Nothing renews by itself
(approvals/services/grants.py asks the approvers before expiry and lapses the grant at it). Apart from
services/grants.py because it routes a new proposal (services/intake), which imports that module."""

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from approvals.canonical import action_digest, canonical_bytes
from approvals.models import Grant, Proposal
from approvals.policy.grants import parse_terms
from approvals.policy.history import target_key
from approvals.policy.reserved import GRANT_TOOL
from approvals.services.common import proposal_subject
from approvals.services.grants import create_requested, may_manage
from approvals.services.intake import evaluate_and_route
from audit.labels import actor_label
from audit.models import Verb
from audit.trail import audit_time, record
from lib.errors import Conflict, NotFound, RevokeRefused

# A renewal request waits for its votes this long at most (the policy's TTL may be shorter).
RENEWAL_WAIT = timedelta(days=3)


def renewed_terms(grant: Grant) -> dict[str, Any]:
    """The grant's terms for the window that follows it, as the arguments of a grant request."""
    start = grant.not_before or grant.activated_at or grant.created_at
    window = grant.expires_at - start
    terms: dict[str, Any] = {
        "tool_pattern": grant.tool_pattern,
        "not_before": audit_time(grant.expires_at),
        "expires_at": audit_time(grant.expires_at + window),
        "max_uses": str(grant.max_uses),
        "principal": grant.principal_id,
    }
    if grant.condition:
        terms["condition"] = grant.condition
    if grant.max_amount:
        terms["max_amount"] = dict(grant.max_amount)
    if grant.environment:
        terms["environment"] = grant.environment
    if grant.data_class:
        terms["data_class"] = grant.data_class
    return terms


def renew_grant(grant_id: Any, actor: Any) -> Grant:
    """Ask for the grant's renewal: a new grant request with the same terms for the next window of the
    same length, made by `actor` (who therefore cannot approve it: someone else does), routed by policy
    like the agent's own request. Returns the new grant (proposed)."""
    with transaction.atomic(durable=True):
        old = (
            Grant.objects.select_for_update(of=("self",))
            .select_related("proposal", "agent", "tenant")
            .filter(pk=grant_id, tenant__memberships__user=actor)
            .first()
        )
        if old is None:
            raise NotFound("not_found", "no such grant")
        if not may_manage(old, actor):
            raise RevokeRefused(
                "not_eligible", "only an approver of this grant or a tenant admin can renew it"
            )
        if old.state != Grant.State.ACTIVE:
            raise Conflict("not_renewable", f"the grant is {old.state}; only a grant in force can be renewed")
        if Grant.objects.filter(renews=old, state=Grant.State.PROPOSED).exists():
            raise Conflict("renewal_pending", "a renewal of this grant already waits for its votes")
        now = timezone.now()
        arguments = renewed_terms(old)
        terms = parse_terms(arguments, principal_id=old.principal_id, now=now)
        action = {"tool": GRANT_TOOL, "arguments": arguments}
        request = old.proposal
        renewals = Proposal.objects.filter(
            agent=request.agent,
            task_id=request.task_id,
            request_id__startswith=f"{request.request_id}.renewal",
        ).count()
        proposal = Proposal.objects.create(
            tenant_id=old.tenant_id,
            agent=old.agent,
            task_id=request.task_id,
            context_id=request.context_id,
            request_id=f"{request.request_id}.renewal{renewals + 1}"[:200],
            summary=f"Renewal of a standing grant: {request.summary}"[:500],
            action=action,
            action_canonical=canonical_bytes(action).decode(),
            action_digest=action_digest(action),
            tool=GRANT_TOOL,
            target_key=target_key(action),
            principal_id=request.principal_id,
            principal_display=request.principal_display,
            agent_version=request.agent_version,
            consequences=request.consequences,
            edited_by=actor,  # who asked for it: someone else approves it
            expires_at=min(old.expires_at, now + RENEWAL_WAIT),
        )
        record(
            old.tenant_id,
            actor=actor_label(actor),
            verb=Verb.PROPOSAL_SUBMITTED,
            subject=proposal_subject(proposal),
            data={
                "via": "renewal",
                "renews": str(old.id),
                "task_id": proposal.task_id,
                "request_id": proposal.request_id,
                "tool": proposal.tool,
                "action_digest": proposal.action_digest,
            },
        )
        grant = create_requested(proposal, terms, renews=old)
        evaluate_and_route(proposal, requested_expiry=proposal.expires_at, actor=actor_label(actor))
    return grant
