"""The agent-facing HTTP side: the REST API (/api/v1/), the pull of a decision, and the A2A push webhook."""
