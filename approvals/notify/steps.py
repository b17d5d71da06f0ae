"""The worker's notification steps, in the order it runs them each tick (approvals/worker/loop.py): chasing
first (it records reminders and escalations, which the channels then show), announcing new proposals
(it plans their chat posts), marking the posts of changed proposals due, then each channel. Each step
reads what is due, not everything that waits."""

from approvals.notify import announce, chase, push, slack_sync, teams
from approvals.services.chat_posts import mark_changed_posts_due
from approvals.services.delegations import note_ended_delegations

STEPS = (
    ("reminders and escalation", chase.run),
    ("new proposals announced", announce.run),
    ("chat posts of changed proposals", mark_changed_posts_due),
    ("slack", slack_sync.run),
    ("teams", teams.run),
    ("push", push.run),
    ("delegation ends", note_ended_delegations),
)
