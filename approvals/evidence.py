"""The approvals half of a proposal's evidence packet: what the audit log cannot say.

audit/exports/evidence.py builds the packet from the audit log and asks for this record through the provider
that approvals registers at start-up (approvals/apps.py), because audit/ never imports approvals/.
"""

from approvals.models import Decision, OutboxMessage, Proposal
from approvals.policy.headline import action_headline


def proposal_record(tenant_id: int, proposal_id) -> dict | None:
    """What the evidence packet needs beyond the audit log, or None if the proposal is not the tenant's."""
    proposal = Proposal.objects.filter(pk=proposal_id, tenant_id=tenant_id).select_related("agent").first()
    if proposal is None:
        return None
    decision = Decision.objects.filter(proposal=proposal).first()
    outbox = OutboxMessage.objects.filter(proposal=proposal).order_by("created_at")
    headline = action_headline(proposal.action, proposal.consequences)
    return {
        "id": str(proposal.id),
        "state": proposal.state,
        "agent": proposal.agent.slug,
        "agent_audience": proposal.agent.audience,
        "envelope": {
            "task_id": proposal.task_id,
            "context_id": proposal.context_id,
            "request_id": proposal.request_id,
            "summary": proposal.summary,
            "action": proposal.action,
            "action_digest": proposal.action_digest,
            "principal": {"id": proposal.principal_id, "display": proposal.principal_display},
            "agent_version": proposal.agent_version,
            "consequences": proposal.consequences,
            "diff": proposal.diff,
            "evidence": proposal.evidence,
            "expires_at": proposal.expires_at,
            "supersedes": str(proposal.supersedes_id or "") or None,
        },
        "requirements": proposal.requirements,
        # Reviewer's headline as the page showed it: the amount with its currency (and whether the digest
        # binds the currency), the target as its history spells it.
        "headline": {"text": headline.text, "currency_note": headline.currency_note},
        "transaction_id": proposal.transaction_id,
        "outcome_detail": proposal.outcome_detail,
        "compensation_note": proposal.compensation_note,
        "decision": None
        if decision is None
        else {
            "jti": str(decision.jti),
            "kind": decision.kind,
            "token": decision.token,
            "kid": decision.kid,
            "rev": decision.rev,
            "issued_at": decision.issued_at,
            "expires_at": decision.expires_at,
            "consume_required": decision.consume_required,
            "consumed_at": decision.consumed_at,
            "revoked_at": decision.revoked_at,
            "revoke_reason": decision.revoke_reason,
        },
        "deliveries": [
            {
                "kind": m.kind,
                "message_id": m.message_id,
                "status": m.status,
                "attempts": m.attempts,
                "last_error": m.last_error,
                "created_at": m.created_at,
                "delivered_at": m.delivered_at,
            }
            for m in outbox
        ],
    }
