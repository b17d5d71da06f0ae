"""Actors and the audit record every service writes in its own transaction."""

from approvals.models import Agent


def agent_actor(agent: Agent) -> str:
    return f"agent:{agent.slug}"


def proposal_subject(proposal) -> str:
    return f"proposal:{proposal.id}"
