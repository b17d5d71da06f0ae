"""Never let a request expire unseen: reachability is checked at intake (tenant admins told at once, the
page says so), reminders and the escalation step happen at their times, done by the worker (the tests
drive the clock with time-machine: no sleeps), and expiry stays closed."""

from datetime import timedelta

import pytest
import time_machine
from django.core import mail
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.models import Proposal, Vote
from approvals.models.notifications import FollowUp, StandIn
from approvals.notify import chase
from approvals.policy.notifications import notifications_error
from approvals.services import follow_ups
from approvals.services.follow_ups import due_follow_ups
from approvals.worker.loop import Worker
from audit.models import AuditEvent, Verb
from lib.errors import PolicyInvalid, VoteRefused
from tests import factories
from tests.factories import submit, trail_name

pytestmark = pytest.mark.django_db


def mails_to(subject_part: str) -> list[str]:
    return sorted(m.to[0] for m in mail.outbox if subject_part in m.subject)


def at_percent(proposal, percent: float):
    """A time-machine travel to `percent` of the proposal's TTL."""
    return time_machine.travel(
        proposal.created_at + (proposal.expires_at - proposal.created_at) * (percent / 100), tick=False
    )


def vote(proposal, person, verdict="approve"):
    return factories.vote(proposal, person, verdict, reason="checked")


# --- reachability at intake ------------------------------------------------------------------------


def test_a_reachable_quorum_is_not_reported(agent, refund_policy, requester, reviewer_a, admin_user):
    proposal = submit(agent)
    Worker().tick()
    follow_up = FollowUp.objects.get(proposal=proposal)
    assert follow_up.reach_checked_at is not None and follow_up.unreachable == {}
    assert mails_to("cannot reach its quorum") == []


def test_an_unreachable_quorum_is_reported_at_once_to_the_admins_and_on_the_page(
    tenant, agent, requester, reviewer_a, admin_user
):
    # Two finance approvals; finance is the requester (never for their own request), Alice, and Dan who
    # has no authenticator: only one person can decide.
    factories.make_user("dan", tenant=tenant, groups=["finance"], totp=False)
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 2}]
    )
    proposal = submit(agent)
    Worker().tick()  # its first look at the new proposal (woken by intake's commit, or its poll)
    event = AuditEvent.objects.get(verb=Verb.PROPOSAL_UNREACHABLE, subject=f"proposal:{proposal.id}")
    assert event.data == {"missing": [{"group": "finance", "count": 2, "reachable": 1}]}
    assert mails_to("cannot reach its quorum") == ["admin@example.test"]
    assert "finance needs 2, 1 can decide" in mail.outbox[-1].body
    Worker().tick()
    assert mails_to("cannot reach its quorum") == ["admin@example.test"]  # told once
    page = factories.verified_client(reviewer_a).get(f"/proposals/{proposal.id}/")
    assert b"cannot reach its quorum" in page.content


def test_people_out_of_office_count_through_their_delegate_only(
    tenant, agent, requester, reviewer_a, reviewer_c
):
    from django.utils import timezone

    from approvals.services.delegations import set_delegation

    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 1}]
    )
    now = timezone.now()
    set_delegation(
        actor=reviewer_a, tenant=tenant, delegate=requester, starts_at=now, ends_at=now + timedelta(days=1)
    )
    proposal = submit(agent)  # Alice is away and her delegate is the requester: nobody can decide
    Worker().tick()
    assert FollowUp.objects.get(proposal=proposal).unreachable["missing"][0]["reachable"] == 0
    set_delegation(
        actor=reviewer_a,
        tenant=tenant,
        delegate=reviewer_c,
        starts_at=now + timedelta(days=2),
        ends_at=now + timedelta(days=3),
    )
    with time_machine.travel(now + timedelta(days=2, hours=1), tick=False):
        later = submit(agent, action=factories.refund_action(order_id="9"))
        Worker().tick()
    assert FollowUp.objects.get(proposal=later).unreachable == {}  # Carol stands in for Alice then


# --- reminders -------------------------------------------------------------------------------------


def test_reminders_reach_the_people_who_have_not_decided_at_their_times(
    tenant, agent, requester, reviewer_a, reviewer_b
):
    factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        thresholds=[{"group": "finance", "count": 2}],
        ttl_seconds=1000,
        notifications={"reminders": [50, 80]},
    )
    proposal = submit(agent)
    vote(proposal, reviewer_b)
    with at_percent(proposal, 49):
        Worker().tick()
    assert mails_to("Reminder") == []
    with at_percent(proposal, 51):
        Worker().tick()
        Worker().tick()
    assert mails_to("Reminder") == ["reviewer_a@example.test"]  # Bob already voted
    with at_percent(proposal, 81):
        Worker().tick()
    assert mails_to("Reminder") == ["reviewer_a@example.test", "reviewer_a@example.test"]
    reminded = AuditEvent.objects.filter(verb=Verb.PROPOSAL_REMINDED, subject=f"proposal:{proposal.id}")
    assert [e.data["percent_of_ttl"] for e in reminded.order_by("at")] == [[50], [80]]


# --- escalation ------------------------------------------------------------------------------------


@pytest.mark.parametrize("step", [{"group": "ops"}, {"people": ["reviewer_c"]}], ids=["group", "on-call"])
def test_the_escalation_step_adds_people_to_the_eligible_set_at_its_time(
    tenant, agent, requester, reviewer_a, reviewer_c, step
):
    factories.make_group(tenant, "ops")
    factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        ttl_seconds=1000,
        notifications={"escalation": {"before_expiry_seconds": 300, **step}},
    )
    proposal = submit(agent)
    with at_percent(proposal, 60):
        Worker().tick()
        with pytest.raises(VoteRefused) as refused:
            vote(proposal, reviewer_c)
    assert refused.value.code == "not_eligible"
    with at_percent(proposal, 71):  # 290 s before expiry
        Worker().tick()
        assert StandIn.objects.filter(proposal=proposal, user=reviewer_c).exists()
        assert (
            str(proposal.id).encode() in factories.verified_client(reviewer_c).get("/").content
        )  # in the queue
        assert mails_to("Escalated to you") == ["reviewer_c@example.test"]
        vote(proposal, reviewer_c)
    proposal.refresh_from_db()
    assert proposal.state == "approved"
    escalated = AuditEvent.objects.get(verb=Verb.PROPOSAL_ESCALATED, subject=f"proposal:{proposal.id}")
    assert escalated.data["added"] == [trail_name("reviewer_c")]


def test_escalation_never_adds_the_requester_as_a_decider(tenant, agent, requester, reviewer_a):
    factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        ttl_seconds=1000,
        notifications={"escalation": {"before_expiry_seconds": 300, "people": ["requester"]}},
    )
    proposal = submit(agent)
    with at_percent(proposal, 80):
        Worker().tick()
        with pytest.raises(VoteRefused) as refused:
            vote(proposal, requester)
    assert refused.value.code == "self_approval"
    assert not Vote.objects.exists()


# --- expiry ------------------------------------------------------------------------------------------


def test_at_expiry_it_closes_and_may_tell_the_admins_that_nobody_looked(
    tenant, agent, requester, reviewer_a, admin_user
):
    factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        ttl_seconds=1000,
        notifications={"at_expiry": "expire_closed_tell_admins"},
    )
    proposal = submit(agent)
    with at_percent(proposal, 101):
        Worker().tick()
        Worker().tick()
    proposal.refresh_from_db()
    assert proposal.state == "expired"  # silence never approves
    assert mails_to("expired unseen") == ["admin@example.test"]


# --- the policy fields -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"reminders": [0]}, "from 1 to 99"),
        ({"reminders": [50, 50]}, "named twice"),
        ({"escalation": {"group": "ops"}}, "before_expiry_seconds"),
        ({"escalation": {"before_expiry_seconds": 60, "group": "ops", "people": ["x"]}}, "not both"),
        ({"escalation": {"before_expiry_seconds": 60, "group": "nope"}}, "not a group of this tenant"),
        ({"escalation": {"before_expiry_seconds": 60, "people": ["stranger"]}}, "not reviewers or admins"),
        ({"at_expiry": "approve"}, "always closes"),
        ({"chat_decisions": "yes"}, "true or false"),
        ({"pager": True}, "unknown keys: pager"),
    ],
)
def test_bad_notification_fields_are_refused_naming_what_is_wrong(value, problem):
    assert problem in notifications_error(value, people={"alice"}, group_slugs={"ops", "finance"})


def test_a_policy_version_with_bad_notifications_is_not_stored(tenant):
    with pytest.raises(PolicyInvalid) as refused:
        factories.make_policy(tenant, "refunds", notifications={"reminders": [150]})
    assert "notifications" in str(refused.value.field or refused.value.message)


# --- many at once ----------------------------------------------------------------------------------


def chase_step_executes(agent, new_requests: int) -> list[str]:
    """The executes (round trips on PostgreSQL) of the chasing step's first look at `new_requests` new
    requests."""
    proposals = [submit(agent) for _ in range(new_requests)]
    with CaptureQueriesContext(connection) as queries:
        assert chase.run() == 0  # reachable: nothing to tell
    checked = FollowUp.objects.filter(proposal__in=proposals, reach_checked_at__isnull=False)
    assert checked.count() == new_requests
    return [query["sql"] for query in queries]


def without_updates(executes: list[str]) -> list[str]:
    return [sql for sql in executes if not sql.startswith('UPDATE "approvals_followup"')]


def test_the_first_looks_at_many_new_requests_cost_the_round_trips_of_one(
    agent, refund_policy, requester, reviewer_a
):
    # One transaction, one locked read and the updates in one round trip for the step's batch (a stream
    # of new requests is the common case): before, each follow-up had its own transaction, read and save.
    one, eight = chase_step_executes(agent, 1), chase_step_executes(agent, 8)
    assert len(without_updates(eight)) == len(without_updates(one))
    if connection.vendor == "postgresql":  # (SQLite runs held writes one by one, in the process)
        assert len(eight) == len(one)


def test_a_long_batch_is_chased_a_few_at_a_time(monkeypatch, agent, refund_policy, requester, reviewer_a):
    # A batch's transaction holds its proposals' row locks until it commits (a vote waits for it).
    monkeypatch.setattr(follow_ups, "CHASED_TOGETHER", 3)
    executes = chase_step_executes(agent, 8)  # (it checks that all 8 were looked at)
    locked_reads = [sql for sql in executes if 'FROM "approvals_followup" INNER JOIN' in sql]
    assert len(locked_reads) == 3  # 3 + 3 + 2


def test_a_follow_up_that_cannot_be_chased_holds_back_no_other(
    agent, refund_policy, requester, reviewer_a, caplog
):
    first, broken, last = (submit(agent) for _ in range(3))
    # Pinned requirements this version cannot read (an escalation step without its time): its chase
    # raises, as any fault in one proposal's step would.
    Proposal.objects.filter(pk=broken.pk).update(
        requirements={**broken.requirements, "escalations": [{"group": "finance"}]}
    )
    chase.run()
    looked = set(
        FollowUp.objects.filter(reach_checked_at__isnull=False).values_list("proposal_id", flat=True)
    )
    assert looked == {first.id, last.id}  # the batch rolled back and the others were chased one by one
    assert "chasing follow-up" in caplog.text
    assert due_follow_ups() == [FollowUp.objects.get(proposal=broken).pk]  # still due, for the next tick
    chase.run()  # still due, tried again, and still nobody else is held back
