"""The pull path for agents that are not A2A servers (DESIGN.md "A2A contract", the paragraph on MCP,
LangGraph, OpenAI Agents and plain REST): `GET /api/v1/proposals/<id>/decision?wait=<seconds>`.

It answers the same signed token the A2A continuation carries (the stored `Decision.token`), so the
agent verifies it with the same gate and consumes it through the same endpoint. Read-only: it changes
nothing, so it needs no service function and writes no audit event (the decision was recorded when it
was made; consuming it is what moves the proposal).

A reviewer's edit supersedes the agent's proposal with a new one, whose decision names the original
request in `replaces`: the pull follows the supersession chain (same agent only), so polling the id
the agent was given finds the decision of the edit too.

The wait is a bounded long poll: the view re-reads the proposal every POLL_INTERVALS seconds (0.2 s,
growing to 1 s) until the decision exists, the proposal closes without one, or `wait` (at most
MAX_WAIT_SECONDS) runs out. Simple and correct on SQLite and PostgreSQL alike; the cost is one small
indexed query per interval per waiting agent and a worker thread held for the wait. Waking on the
channel layer's proposal group instead of polling is the next step if many agents wait at once.
"""

import itertools
import time

from django.http import Http404
from ninja import Query, Schema
from pydantic import Field

from approvals.agent_api.api import ERRORS, api, uuid_or_404
from approvals.models import Proposal
from approvals.states import TERMINAL, State

MAX_WAIT_SECONDS = 60
POLL_INTERVALS = (0.2, 0.3, 0.5, 0.75, 1.0)  # seconds between reads; the last repeats
# Longest supersession chain followed (edits and answered questions); far beyond any real review.
MAX_CHAIN = 50

pause = time.sleep  # module-level so tests can observe that the view is waiting


class DecisionWait(Schema):
    wait: int = Field(0, ge=0, le=MAX_WAIT_SECONDS, description="seconds to wait for the decision")


class DecisionToken(Schema):
    token: str | None = Field(description="the signed decision (compact JWS), or null while there is none")
    state: str = Field(description="the state of the proposal that carries (or will carry) the decision")
    proposal_id: str = Field(description="that proposal: a reviewer's edit supersedes the one submitted")


def _latest_with_decision(agent, proposal_id) -> Proposal:
    """The agent's proposal, or the newest proposal that superseded it, with its decision (if any)."""
    proposal = Proposal.objects.select_related("decision").filter(pk=proposal_id, agent=agent).first()
    if proposal is None:
        raise Http404
    for _ in range(MAX_CHAIN):
        if getattr(proposal, "decision", None) is not None or proposal.state != State.SUPERSEDED:
            return proposal
        successor = (
            Proposal.objects.select_related("decision").filter(supersedes=proposal, agent=agent).first()
        )
        if successor is None:
            return proposal
        proposal = successor
    return proposal


def _answer(proposal: Proposal) -> dict:
    decision = getattr(proposal, "decision", None)
    return {
        "token": decision.token if decision is not None else None,
        "state": proposal.state,
        "proposal_id": str(proposal.id),
    }


@api.get(
    "/proposals/{proposal_id}/decision",
    response={200: DecisionToken, **ERRORS},
    summary="The signed decision for one of this agent's proposals, waiting up to `wait` seconds for it",
    description="200 with `token` once decided (approved, rejected or needs_info: verify it with the gate "
    "before acting); 200 with `token: null` and the proposal's `state` when the wait ends first or the "
    "proposal closed without a decision (expired, cancelled). Only the proposal's own agent may read it.",
)
def decision_token(request, proposal_id: str, params: Query[DecisionWait]):
    wanted = uuid_or_404(proposal_id)
    deadline = time.monotonic() + params.wait
    for attempt in itertools.count():
        proposal = _latest_with_decision(request.auth, wanted)
        answer = _answer(proposal)
        remaining = deadline - time.monotonic()
        if answer["token"] or proposal.state in TERMINAL or remaining <= 0:
            return answer
        pause(min(POLL_INTERVALS[min(attempt, len(POLL_INTERVALS) - 1)], remaining))
