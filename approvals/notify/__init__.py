"""Reaching reviewers outside the pages: reminders, escalation and reachability (`chase`, `reach`),
Slack (`slack_messages`, `slack_client`, `slack_views`), delegation (`standins`), all driven by the worker
and the models in `models`. The state changes are services (approvals/services/follow_ups.py,
delegations.py, slack_links.py); this package reads, renders and calls out."""
