"""Actors and the audit record every service writes in its own transaction."""

from approvals.models import Agent
from audit.labels import agent_label


def agent_actor(agent: Agent) -> str:
    return agent_label(agent.slug)


def proposal_subject(proposal) -> str:
    return f"proposal:{proposal.id}"
