"""A door's proposal taken in through approvals' intake (approvals/services/intake), and intake's
refusals said in OAuth's words."""

from typing import Any

from approvals.models import Agent, Proposal
from approvals.schemas import ApprovalRequest, ProposalSubmission
from approvals.services.intake import submit_proposal
from lib.errors import HaltedError, QuotaExceeded, ServiceError
from oauth.errors import OAuthError

# Intake's refusals that mean the described operation itself is unusable.
DETAIL_CODES = {"too_large", "bad_action", "digest_mismatch", "invalid"}


def as_oauth_error(error: ServiceError) -> OAuthError:
    if isinstance(error, HaltedError):
        return OAuthError("temporarily_unavailable", error.message, status=503, retry_after=30)
    if isinstance(error, QuotaExceeded):
        return OAuthError("slow_down", error.message, status=429, retry_after=error.retry_after)
    if error.code == "request_id_reused":
        return OAuthError("invalid_grant", "this challenge's jti was already used for another operation")
    if error.code in DETAIL_CODES:
        return OAuthError("invalid_authorization_details", error.message)
    return OAuthError("invalid_request", error.message)


def file_proposal(
    agent: Agent, *, task_id: str, request: ApprovalRequest, token_claims: dict[str, Any], via: str
) -> Proposal:
    """Intake, idempotent on (agent, task id, request id) as on the REST path; policy decides at once
    or routes to people. Raises OAuthError for intake's refusals (nothing is stored)."""
    try:
        proposal, _created = submit_proposal(
            agent,
            ProposalSubmission(task_id=task_id, request=request),
            via=via,
            token_claims=token_claims,
        )
    except ServiceError as error:
        raise as_oauth_error(error) from error
    return proposal
