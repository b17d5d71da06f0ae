"""Chasing a proposal that waits for people: reachability right after intake, reminders, the escalation
step, and the note that an unseen request expired. Each function is one transaction with its audit event; the
worker (approvals/notify/chase.py) calls them at their times and then tells the people they name.

The worker reads only follow-ups that are due (`FollowUp.due_at`): each chase sets the next time
something can happen (a reminder, the escalation step, the expiry), so a tick costs what is due and a
follow-up far down a long queue is chased at its time like the first.
"""

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from approvals.models import Proposal
from approvals.models.notifications import FollowUp, StandIn
from approvals.selectors.reach import ReachReader
from approvals.services.common import proposal_subject
from approvals.states import WAITING_FOR_PEOPLE
from approvals.storage.rows import insert_statement, update_statement
from audit.labels import SYSTEM, user_label
from audit.models import Verb
from audit.people import read_pseudonyms
from audit.trail import audit_time, record
from lib.storage.held_writes import held_writes, write
from tenants.models import ApproverGroup, TenantMembership

if TYPE_CHECKING:
    from django.contrib.auth.models import User

log = logging.getLogger(__name__)


def open_follow_up(proposal: Proposal) -> None:
    """At intake, in its transaction: the worker chases this proposal from now on (one INSERT, with
    intake's other writes: lib/storage/held_writes.py)."""
    write(*insert_statement(FollowUp(proposal=proposal)))


def _note_reachability(follow_up: FollowUp, now: datetime, reach: ReachReader) -> dict:
    """The worker's first look: can enough people decide it? If not, the audit trail says so and the
    admins are told in this tick (the worker is woken by intake's commit or polls within seconds)."""
    proposal = follow_up.proposal
    found = reach.reachability(proposal)
    follow_up.reach_checked_at = now
    follow_up.unreachable = {} if found.met else {"missing": found.missing()}
    if follow_up.unreachable:
        record(
            proposal.tenant_id,
            actor=SYSTEM,
            verb=Verb.PROPOSAL_UNREACHABLE,
            subject=proposal_subject(proposal),
            data=follow_up.unreachable,
        )
    return follow_up.unreachable


def reminder_time(proposal: Proposal, percent: int) -> datetime:
    return proposal.created_at + (proposal.expires_at - proposal.created_at) * (percent / 100)


def escalation_time(proposal: Proposal, step: dict) -> datetime:
    return proposal.expires_at - timedelta(seconds=int(step["before_expiry_seconds"]))


@dataclass
class Chase:
    """What one follow-up step decided, for the worker to tell (after the commit)."""

    proposal: Proposal
    reminders: list[int] = field(default_factory=list)  # the percents due now
    escalated: list = field(default_factory=list)  # the people added to the eligible set
    tell_admins_unreachable: dict = field(default_factory=dict)
    tell_admins_expired: bool = False


# What a chase may change on its follow-up row, written back for the whole batch in one round trip.
CHASED_FIELDS = (
    "done",
    "expiry_told_at",
    "reach_checked_at",
    "unreachable",
    "admins_told_at",
    "reminders_sent",
    "escalated_at",
    "due_at",
)


# Follow-ups chased in one transaction at most: it holds their proposals' row locks (a vote on one of
# them waits) until it commits.
CHASED_TOGETHER = 50


def chase_due(follow_up_ids, now: datetime | None = None, reach: ReachReader | None = None) -> list[Chase]:
    """Record what is due for these open follow-ups now (reminders, the escalation step, the admins'
    notes) and when to look at each again; returns the chases with something to tell. A follow-up whose
    proposal stopped waiting is closed. `reach`: the chasing step's, which reads each tenant's group facts
    once for all the proposals it looks at.

    CHASED_TOGETHER at a time in one transaction: one locked read of the follow-ups with their proposals
    (in id order, as every chase locks them) and their updates in one round trip, instead of a
    transaction, a read and a save each: under a stream of new requests (each one's first look) the
    worker's CPU and round trips per request were mostly these."""
    now = now or timezone.now()
    reach = reach or ReachReader()
    ids = sorted(follow_up_ids)
    chases: list[Chase] = []
    for start in range(0, len(ids), CHASED_TOGETHER):
        chases += _chase_together(ids[start : start + CHASED_TOGETHER], now, reach)
    return chases


def _chase_together(ids: list, now: datetime, reach: ReachReader) -> list[Chase]:
    """If anything in the batch fails, the batch rolls back and each follow-up is chased in a
    transaction of its own (chase_one), so one bad proposal holds back no other."""
    try:
        with transaction.atomic(durable=True):
            return _chase_locked_batch(ids, now, reach)
    except Exception:
        log.exception("chasing %d follow-ups together failed; chasing them one by one", len(ids))
    chases = []
    for follow_up_id in ids:
        try:
            chase = chase_one(follow_up_id, now, reach)
        except Exception:
            log.exception("chasing follow-up %s failed; the next tick tries again", follow_up_id)
            continue
        if chase is not None:
            chases.append(chase)
    return chases


def chase_one(follow_up_id, now: datetime | None = None, reach: ReachReader | None = None) -> Chase | None:
    """chase_due for one follow-up, in a transaction of its own; None when nothing is to be told."""
    now = now or timezone.now()
    reach = reach or ReachReader()
    with transaction.atomic(durable=True):
        chases = _chase_locked_batch([follow_up_id], now, reach)
    return chases[0] if chases else None


def _chase_locked_batch(ids: list, now: datetime, reach: ReachReader) -> list[Chase]:
    """In the caller's transaction: lock and chase the follow-ups of `ids` that are still open and due
    (another worker may have chased some since they were listed), then write them back together."""
    locked = FollowUp.objects.select_for_update().select_related("proposal").filter(pk__in=ids).order_by("pk")
    chased, chases = [], []
    for follow_up in locked:
        if follow_up.done or follow_up.due_at > now:
            continue
        chased.append(follow_up)
        chase = _chase(follow_up, now, reach)
        if chase is not None:
            chases.append(chase)
    with held_writes():  # the updates in one round trip (a bulk_update's CASE expressions cost more CPU)
        for follow_up in chased:
            write(*update_statement(follow_up, CHASED_FIELDS))
    return chases


def _chase(follow_up: FollowUp, now: datetime, reach: ReachReader) -> Chase | None:
    """One locked follow-up's step: what is due now, recorded, and its next look; changes the row in
    memory (the caller writes it). None when nothing is to be told."""
    proposal = follow_up.proposal
    chase = Chase(proposal)
    if proposal.state not in WAITING_FOR_PEOPLE:
        follow_up.done = True
        if proposal.state == "expired" and _tells_admins_at_expiry(proposal) and not proposal.votes.exists():
            follow_up.expiry_told_at = now
            chase.tell_admins_expired = True
        return chase if chase.tell_admins_expired else None
    if follow_up.reach_checked_at is None:
        _note_reachability(follow_up, now, reach)
    if follow_up.unreachable and follow_up.admins_told_at is None:
        follow_up.admins_told_at = now
        chase.tell_admins_unreachable = follow_up.unreachable
    due = [
        p
        for p in proposal.requirements.get("reminders", [])
        if p not in follow_up.reminders_sent and reminder_time(proposal, p) <= now < proposal.expires_at
    ]
    if due:
        follow_up.reminders_sent = sorted({*follow_up.reminders_sent, *due})
        chase.reminders = due
        record(
            proposal.tenant_id,
            actor=SYSTEM,
            verb=Verb.PROPOSAL_REMINDED,
            subject=proposal_subject(proposal),
            data={"percent_of_ttl": due, "expires_at": audit_time(proposal.expires_at)},
        )
    steps = proposal.requirements.get("escalations", [])
    if follow_up.escalated_at is None and steps:
        due_steps = [s for s in steps if escalation_time(proposal, s) <= now < proposal.expires_at]
        if due_steps:
            follow_up.escalated_at = now
            chase.escalated = _escalate(proposal, due_steps, now)
    follow_up.due_at = next_look(proposal, follow_up, now)
    if chase.reminders or chase.escalated or chase.tell_admins_unreachable:
        return chase
    return None


# A proposal still waiting after its expiry time (the expiry step has not closed it yet) is looked at
# again this much later.
LOOK_AGAIN_AFTER_EXPIRY = timedelta(seconds=30)


def next_look(proposal: Proposal, follow_up: FollowUp, now: datetime) -> datetime:
    """The next time something can happen to this waiting proposal's follow-up: its next reminder, its
    escalation step, or its expiry (when it stops waiting at the latest, and the admins may be told)."""
    times = [
        reminder_time(proposal, p)
        for p in proposal.requirements.get("reminders", [])
        if p not in follow_up.reminders_sent
    ]
    if follow_up.escalated_at is None:
        times += [escalation_time(proposal, s) for s in proposal.requirements.get("escalations", [])]
    upcoming = [t for t in [*times, proposal.expires_at] if t > now]
    return min(upcoming) if upcoming else now + LOOK_AGAIN_AFTER_EXPIRY


def _tells_admins_at_expiry(proposal: Proposal) -> bool:
    return proposal.requirements.get("at_expiry") == "expire_closed_tell_admins"


def _escalate(proposal: Proposal, steps: list[dict], now: datetime) -> list:
    """Add the steps' people to the eligible set (StandIn rows) and record it. Compliance staff and
    people outside the tenant are never added; separation of duties is checked when they vote."""
    users = get_user_model().objects.filter(is_active=True, tenant_memberships__tenant_id=proposal.tenant_id)
    users = users.exclude(tenant_memberships__role=TenantMembership.Role.COMPLIANCE)
    chosen: dict[int, User] = {}
    for step in steps:
        if "group" in step:
            group = ApproverGroup.objects.filter(tenant_id=proposal.tenant_id, slug=step["group"]).first()
            found = users.filter(approver_groups=group) if group else users.none()
        else:
            found = users.filter(username__in=step["people"])
        chosen.update({u.pk: u for u in found})
    StandIn.objects.bulk_create(
        [StandIn(proposal=proposal, user=user, added_at=now) for user in chosen.values()],
        ignore_conflicts=True,
    )
    read_pseudonyms(chosen.values())
    record(
        proposal.tenant_id,
        actor=SYSTEM,
        verb=Verb.PROPOSAL_ESCALATED,
        subject=proposal_subject(proposal),
        data={
            "steps": steps,
            "added": sorted(user_label(u) for u in chosen.values()),
            "expires_at": audit_time(proposal.expires_at),
        },
    )
    return sorted(chosen.values(), key=lambda u: u.get_username())


def due_follow_ups(now: datetime | None = None, limit: int = 200) -> list[int]:
    """The open follow-ups whose next look is due, the longest due first (an index scan of the due)."""
    now = now or timezone.now()
    due = FollowUp.objects.filter(done=False, due_at__lte=now).order_by("due_at", "id")
    return list(due.values_list("pk", flat=True)[:limit])


def unannounced_follow_ups(limit: int = 50) -> list[FollowUp]:
    """New proposals the worker has not yet posted to chat and pushed to phones, oldest first."""
    rows = FollowUp.objects.filter(done=False, announced_at=None).select_related("proposal__agent")
    return list(rows.order_by("id")[:limit])


def mark_announced(follow_ups: list[FollowUp], now: datetime | None = None) -> None:
    """These new proposals were announced on every channel (approvals/notify/announce.py): not again. One
    UPDATE for the step's batch. No audit event: what each channel sent is recorded by its own rows."""
    if follow_ups:
        FollowUp.objects.filter(pk__in=[f.pk for f in follow_ups]).update(announced_at=now or timezone.now())
