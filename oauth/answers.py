"""What a poll answers, for TAC and CIBA alike: the decision's access token, or the standard's error
for a proposal still waiting, refused, expired or closed; and the pacing that answers `slow_down`.

The access token is the proposal's signed decision as it was stored (approvals/services/decisions.py),
whose `token_claims` carry the door's profile claims; polling again answers the same token."""

import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db.models import F, Q, QuerySet
from django.utils import timezone

from approvals.models import Decision, Proposal
from approvals.states import STARTED, WAITING_FOR_PEOPLE, State
from oauth.errors import OAuthError

SLOW_DOWN_STEP_SECONDS = 5  # RFC 8628 §3.5 and the TAC draft §5.3: the interval grows by 5 s
POLL_LEEWAY = timedelta(seconds=1)


def pace(rows: QuerySet[Any], pk: uuid.UUID, interval: int, now: datetime) -> None:
    """Compare-and-set on the row's next allowed poll: a poll before it answers `slow_down` and moves
    both the interval and the next allowed poll 5 s further. Not audited: it changes how often a client
    may ask, not what anyone decided (as approvals' page watchers)."""
    moved = (
        rows.filter(pk=pk)
        .filter(Q(next_poll_at__isnull=True) | Q(next_poll_at__lte=now + POLL_LEEWAY))
        .update(next_poll_at=now + timedelta(seconds=interval))
    )
    if moved != 1:
        slower = interval + SLOW_DOWN_STEP_SECONDS
        rows.filter(pk=pk).update(
            interval=F("interval") + SLOW_DOWN_STEP_SECONDS, next_poll_at=now + timedelta(seconds=slower)
        )
        raise OAuthError("slow_down", f"poll at most every {slower} s")


def token_response(proposal: Proposal, decision: Decision, now: datetime) -> dict[str, Any]:
    return {
        "access_token": decision.token,
        "token_type": "Bearer",
        "expires_in": max(0, int((decision.expires_at - now).total_seconds())),
        "authorization_details": proposal.token_claims.get("authorization_details", []),
    }


def answer_for(proposal: Proposal, now: datetime | None = None) -> dict[str, Any]:
    """The token response, or OAuthError: authorization_pending, access_denied, expired_token."""
    now = now or timezone.now()
    proposal = Proposal.objects.select_related("decision").get(pk=proposal.pk)
    decision: Decision | None = getattr(proposal, "decision", None)
    if proposal.state == State.SUPERSEDED:
        raise OAuthError(
            "access_denied", "the reviewers changed or replaced this request: call the resource again"
        )
    if decision is None:
        if proposal.state in WAITING_FOR_PEOPLE or proposal.state == State.PROPOSED:
            raise OAuthError("authorization_pending")
        if proposal.state == State.EXPIRED:
            raise OAuthError("expired_token", "the request expired before people decided")
        raise OAuthError("access_denied", f"the request was {proposal.state}")
    if decision.kind == Decision.Kind.REJECTED:
        raise OAuthError("access_denied", decision.reason)
    if decision.kind == Decision.Kind.NEEDS_INFO:
        raise OAuthError("access_denied", f"a reviewer asked a question: {decision.reason}")
    if proposal.state == State.REVOKED or decision.revoked_at:
        raise OAuthError("access_denied", "the approval was revoked")
    if proposal.state not in STARTED and (proposal.state == State.EXPIRED or now >= decision.expires_at):
        raise OAuthError("expired_token", "the approval expired before it was used")
    return token_response(proposal, decision, now)
