"""The worker's chasing step: for every follow-up whose time has come, record what is due now
(approvals/services/follow_ups.py: reminders, the escalation step, the admins' notes), then tell the
people by e-mail, on their push devices (approvals/notify/push.py) and in the proposal's Slack thread
(approvals/notify/slack_sync.py). Nothing here waits for a page to be open; the times come from the
pinned requirements and the clock.

What a message carries is Reviewer's own words, the tool and summary as plain text with hidden
characters written out (lib/agent_text.py `visible`), and the link to the page: never a token, a
digest or a code.
"""

import logging
from datetime import datetime

from django.conf import settings
from django.core.mail import EmailMessage, get_connection

from approvals.notify import push, slack_sync
from approvals.notify.audience import tenant_admins, waiting_reviewers
from approvals.notify.common import one_line, proposal_link, when
from approvals.selectors.reach import ReachReader
from approvals.services.follow_ups import Chase, chase_due, due_follow_ups

log = logging.getLogger(__name__)

BATCH = 200  # follow-ups chased per tick at most, the longest due first


def run(now: datetime | None = None) -> int:
    """The worker's step: the follow-ups that are due (services.follow_ups.due_follow_ups). Returns how
    many did something."""
    acted = 0
    reach = ReachReader()  # a new request's first look reads its tenant's groups once per step
    for chase in chase_due(due_follow_ups(now, BATCH), now, reach):
        acted += 1
        try:
            tell(chase)
        except Exception:  # one proposal's mail or Slack failure must not stop the others
            log.exception("could not tell the people of proposal %s", chase.proposal.id)
    return acted


def tell(chase: Chase) -> None:
    proposal = chase.proposal
    what = f"{one_line(proposal.tool, 80)}: {one_line(proposal.summary)}"
    link = proposal_link(proposal)
    mails = []
    if chase.reminders:
        waiting = waiting_reviewers(proposal)
        for person in waiting:
            push.push_to(person, proposal, f"reminder-{max(chase.reminders)}")
        text = (
            f"Reminder: a request waits for your decision and expires at {when(proposal.expires_at)}.\n\n"
            f"{what}\n\nReview it in Reviewer: {link}\n"
        )
        mails += _mails(waiting, "Reminder: a request waits for your decision", text)
        slack_sync.thread_note(proposal, f"Reminder: this request expires at {when(proposal.expires_at)}.")
    if chase.escalated:
        text = (
            "A request was escalated to you: nobody decided it yet and it expires at "
            f"{when(proposal.expires_at)}. You may now decide it.\n\n{what}\n\n"
            f"Review it in Reviewer: {link}\n"
        )
        mails += _mails(chase.escalated, "Escalated to you: a request nobody decided yet", text)
        for person in chase.escalated:
            push.push_to(person, proposal, "escalation")
        names = ", ".join(p.get_full_name() or p.get_username() for p in chase.escalated) or "nobody"
        slack_sync.thread_note(proposal, f"Escalated: {names} may now decide this request as well.")
    if chase.tell_admins_unreachable:
        missing = "; ".join(
            f"{m['group']} needs {m['count']}, {m['reachable']} can decide"
            for m in chase.tell_admins_unreachable["missing"]
        )
        text = (
            "A request cannot reach its quorum: not enough people can decide it (active, not the "
            f"requester, not out of office, with a factor the policy accepts).\n\n{missing}\n\n{what}\n\n"
            f"It expires closed at {when(proposal.expires_at)} unless someone is added. {link}\n"
        )
        mails += _mails(tenant_admins(proposal.tenant_id), "A request cannot reach its quorum", text)
    if chase.tell_admins_expired:
        text = (
            f"A request expired without any decision (it closed: nothing was released).\n\n{what}\n\n{link}\n"
        )
        mails += _mails(tenant_admins(proposal.tenant_id), "A request expired unseen", text)
    if mails:
        get_connection().send_messages(mails)


def _mails(people, subject: str, body: str) -> list[EmailMessage]:
    return [
        EmailMessage(subject, body, settings.DEFAULT_FROM_EMAIL, [person.email])
        for person in people
        if person.email
    ]
