"""Asking a standing grant's approvers to renew it or let it lapse (approvals/services/grants.py
`ask_for_renewals` records it; the worker's `ask_grant_renewals` job tells them here, after the commit):
e-mail, their push devices and a reply in the grant request's Slack thread, as the chase tells people
(approvals/notify/chase.py). Reviewer's own words, the agent's text as one plain line, and the link to
the grants page; never a token."""

import logging
from typing import Any

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.urls import reverse

from approvals.models import Grant
from approvals.notify import push, slack_sync
from approvals.notify.common import one_line, when

log = logging.getLogger(__name__)

SUBJECT = "A standing grant expires soon: renew it or let it lapse"


def tell(grant: Grant, people: list[Any]) -> None:
    link = settings.REVIEWER_ISSUER + reverse("approvals:grants")
    text = (
        f"A standing grant you approved expires at {when(grant.expires_at)}: "
        f"{one_line(grant.tool_pattern, 80)} for agent {one_line(grant.agent.slug, 50)}, "
        f"{grant.uses} of {grant.max_uses} uses spent.\n\n"
        "Renew it (a new request you and the other approvers vote on) or let it lapse: it is never "
        f"renewed by itself.\n\n{link}\n"
    )
    mails = [EmailMessage(SUBJECT, text, settings.DEFAULT_FROM_EMAIL, [p.email]) for p in people if p.email]
    try:
        for person in people:
            push.push_to(person, grant.proposal, "grant-renewal")
        if mails:
            get_connection().send_messages(mails)
        slack_sync.thread_note(
            grant.proposal,
            f"Renewal asked: this standing grant expires at {when(grant.expires_at)}. Its approvers are "
            "asked to renew it or let it lapse; it is never renewed by itself.",
        )
    except Exception:  # one grant's mail or push failure must not stop the others
        log.exception("could not ask for the renewal of grant %s", grant.id)
