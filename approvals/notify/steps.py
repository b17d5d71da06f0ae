"""The worker's notification steps, in the order it runs them each tick (approvals/worker/loop.py): chasing
first (it records reminders and escalations, which the channels then show), then each channel."""

from approvals.notify import chase, push, slack_sync, teams
from approvals.services.delegations import note_ended_delegations

STEPS = (
    ("reminders and escalation", chase.run),
    ("slack", slack_sync.run),
    ("teams", teams.run),
    ("push", push.run),
    ("delegation ends", note_ended_delegations),
)
