"""The approval domain. Rows here are written only by approvals/services/.

Tenant (tenants/models.py, with TenantMembership, ApproverGroup and GroupMembership)
        ├─ Agent (an A2A server, or a pull agent without a card URL; tokens stored hashed)
        ├─ Policy ── PolicyVersion (immutable; active after a second admin approves)
        └─ Proposal ─┬─ Vote
                     ├─ Decision (the signed token; one per proposal)
                     └─ OutboxMessage (continuations and cancels to the agent)
Halt: a kill switch for everything, a tenant, or an agent.

One module per area: agents.py (Agent, Policy, PolicyVersion), proposals.py (Proposal, Vote, Decision,
OutboxMessage, ReviewNotice), batches.py (Batch, BatchMember: a fixed manifest of proposals),
halts.py (Halt, BreakGlassRelease, PostHocReview), notifications.py
(reminders, escalation, delegation, Slack, Teams, webhooks, push); quotas.py (intake quotas' state);
risk.py (the risk levels and
their one rank); live.py (who has a proposal's page open). Import them from here.
"""

from approvals.models.agents import Agent, Policy, PolicyVersion
from approvals.models.batches import Batch, BatchMember
from approvals.models.halts import BreakGlassRelease, Halt, PostHocReview
from approvals.models.live import PageWatcher
from approvals.models.notifications import (
    Delegation,
    FollowUp,
    PushSent,
    PushSubscription,
    SlackIdentity,
    SlackLinkRequest,
    SlackPost,
    SlackRequestSeen,
    SlackWorkspace,
    StandIn,
    TeamsBot,
    TeamsChannel,
    TeamsIdentity,
    TeamsLinkRequest,
    TeamsPost,
    WebhookEndpoint,
)
from approvals.models.proposals import Decision, OutboxMessage, Proposal, ReviewNotice, Vote
from approvals.models.quotas import QuotaState
from approvals.models.risk import Risk

__all__ = [
    "Agent",
    "Batch",
    "BatchMember",
    "BreakGlassRelease",
    "Decision",
    "Delegation",
    "FollowUp",
    "Halt",
    "OutboxMessage",
    "PageWatcher",
    "Policy",
    "PolicyVersion",
    "PostHocReview",
    "Proposal",
    "PushSent",
    "PushSubscription",
    "QuotaState",
    "Risk",
    "ReviewNotice",
    "SlackIdentity",
    "SlackLinkRequest",
    "SlackPost",
    "SlackRequestSeen",
    "SlackWorkspace",
    "StandIn",
    "TeamsBot",
    "TeamsChannel",
    "TeamsIdentity",
    "TeamsLinkRequest",
    "TeamsPost",
    "Vote",
    "WebhookEndpoint",
]
