"""The agent a REST API token belongs to, read on every request with its tenant (no cache: a token
replaced or an agent removed is refused from the next request on, in every process).

The row is found by the SHA-256 of the token (the database never holds the token), the lowest id
first, and the stored hash is compared with the presented one in constant time. The read is plain SQL
(approvals/storage/tokens.py, which names the bench rows it is measured by)."""

import hmac

from approvals.models import Agent
from approvals.storage.tokens import agent_with_token_hash
from lib.tokens import hash_token


def agent_for_token(token: str) -> Agent | None:
    """The agent whose API token this is, with its tenant, or None."""
    digest = hash_token(token)
    agent = agent_with_token_hash(digest)
    if agent is None or not hmac.compare_digest(agent.api_token_hash, digest):
        return None
    return agent
