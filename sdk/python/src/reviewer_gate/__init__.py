"""reviewer-gate: ask Reviewer before an agent acts, and act only on its verified, consumed decision.

- `reviewer_gate.gate`: verify a signed decision (signature, audience, binding, single use), consume it,
  report the outcome. What every path below ends in.
- `reviewer_gate.client`: REST client for agents that are not A2A servers (submit, long-poll, release).
- `reviewer_gate.a2a` (extra `a2a`): one awaited call in an a2a-sdk AgentExecutor.
- `reviewer_gate.mcp_gateway` (extra `mcp`): an MCP server that gates an upstream MCP server's tools.
- `reviewer_gate.langgraph` (extra `langgraph`): a tool node that pauses the graph with interrupt().
- `reviewer_gate.openai_agents` (extra `openai-agents`): the Agents SDK's tool approvals, decided by Reviewer.
- `reviewer_gate.testing`: a fake Reviewer (real Ed25519 keys, loopback HTTP) for agents' own tests.
"""

from reviewer_gate.client import (
    Approval,
    BatchRefused,
    NotApproved,
    ReviewerClient,
    ReviewerUnavailable,
    Submission,
    Throttled,
    build_request,
    current_approval,
)
from reviewer_gate.gate import (
    EXTENSION_URI,
    Gate,
    GateError,
    JWKSKeySource,
    MemoryUsedStore,
    SQLiteUsedStore,
    StaticKeySource,
    VerifiedDecision,
    action_digest,
    approval_request_metadata,
    batch_request_metadata,
    decision_token_from_metadata,
    manifest_digest,
)

__version__ = "0.1.0"

__all__ = [
    "EXTENSION_URI",
    "Approval",
    "BatchRefused",
    "Gate",
    "GateError",
    "JWKSKeySource",
    "MemoryUsedStore",
    "NotApproved",
    "ReviewerClient",
    "ReviewerUnavailable",
    "SQLiteUsedStore",
    "StaticKeySource",
    "Submission",
    "Throttled",
    "VerifiedDecision",
    "__version__",
    "action_digest",
    "approval_request_metadata",
    "batch_request_metadata",
    "build_request",
    "current_approval",
    "decision_token_from_metadata",
    "manifest_digest",
]
