"""The pull path for agents that are not A2A servers (DESIGN.md "A2A contract", the paragraph on MCP,
LangGraph, OpenAI Agents and plain REST): `GET /api/v1/proposals/<id>/decision?wait=<seconds>`.

It answers the same signed token the A2A continuation carries (the stored `Decision.token`), so the
agent verifies it with the same gate and consumes it through the same endpoint. Read-only: it changes
nothing, so it needs no service function and writes no audit event (the decision was recorded when it
was made; consuming it is what moves the proposal).

A reviewer's edit supersedes the agent's proposal with a new one, whose decision names the original
request in `replaces`: the pull follows the supersession chain (same agent only), so polling the id
the agent was given finds the decision of the edit too.

Waiting is done on the event loop by approvals/decision_wait.py, which answers this path in front of
Django (reviewer/asgi.py): a wait there holds no request slot, thread or connection, and is woken by
the decision instead of polling. The operation below describes the endpoint in the OpenAPI document and
answers the same shape where the ASGI app is not in front (Django's test client, WSGI): at once, with
what is there, whatever `wait` says.
"""

from django.http import Http404
from ninja import Query, Schema
from pydantic import Field

from approvals.agent_api.api import ERRORS, ErrorBody, api, uuid_or_404
from approvals.models import Proposal
from approvals.states import State

MAX_WAIT_SECONDS = 60
# Longest supersession chain followed (edits and answered questions); far beyond any real review.
MAX_CHAIN = 50


class NoSuchProposal(Http404):
    """The agent has no proposal with this id (another agent's is not its own)."""


class DecisionWait(Schema):
    wait: int = Field(0, ge=0, le=MAX_WAIT_SECONDS, description="seconds to wait for the decision")


class DecisionToken(Schema):
    token: str | None = Field(description="the signed decision (compact JWS), or null while there is none")
    state: str = Field(description="the state of the proposal that carries (or will carry) the decision")
    proposal_id: str = Field(description="that proposal: a reviewer's edit supersedes the one submitted")


def latest_with_decision(agent, proposal_id) -> Proposal:
    """The agent's proposal, or the newest proposal that superseded it, with its decision (if any)."""
    proposal = Proposal.objects.select_related("decision").filter(pk=proposal_id, agent=agent).first()
    if proposal is None:
        raise NoSuchProposal
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


def answer(proposal: Proposal) -> dict:
    decision = getattr(proposal, "decision", None)
    return {
        "token": decision.token if decision is not None else None,
        "state": proposal.state,
        "proposal_id": str(proposal.id),
    }


@api.get(
    "/proposals/{proposal_id}/decision",
    response={200: DecisionToken, 429: ErrorBody, **ERRORS},
    summary="The signed decision for one of this agent's proposals, waiting up to `wait` seconds for it",
    description="200 with `token` once decided (approved, rejected or needs_info: verify it with the gate "
    "before acting); 200 with `token: null` and the proposal's `state` when the wait ends first or the "
    "proposal closed without a decision (expired, cancelled). Only the proposal's own agent may read it. "
    "A wait holds no server resources: it is woken by the decision. 429 `too_many_waits` with "
    "Retry-After when this agent already has DECISION_WAITS_PER_AGENT waits open.",
)
def decision_token(request, proposal_id: str, params: Query[DecisionWait]):
    # Reached only without the ASGI app in front (see the module doc): the wait is decision_wait.py's.
    return answer(latest_with_decision(request.auth, uuid_or_404(proposal_id)))
