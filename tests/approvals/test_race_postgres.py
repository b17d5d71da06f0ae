"""Concurrency: votes on one proposal are serialized (SELECT ... FOR UPDATE on
PostgreSQL), so twenty people voting at once produce exactly one final state, one signed decision and
one outbox row, and that state is the one the votes imply in the order they committed.

Staged with real threads, each on its own database connection, lined up on a barrier. Each thread is its
own finance member with their own authenticator (TOTP codes are one-time and per person).
"""

import threading

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connections
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts.stepup import step_up_for
from approvals.models import Decision, OutboxMessage, Vote
from approvals.services.tenants import add_group_member, set_tenant_membership
from approvals.services.votes import cast_vote
from approvals.states import State
from audit.chain.verification import verify_chain
from audit.models import AuditEvent, Verb
from lib.errors import VoteRefused
from tests import factories
from tests.factories import submit, totp_code, trail_name

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        not settings.IS_POSTGRES,
        reason="row locks and real concurrent connections need PostgreSQL (set DATABASE_URL)",
    ),
]

THREADS = 20
NEEDED = 2  # two finance approvals, any one rejection ends it


def finance_members(tenant, count: int) -> list:
    """Finance members built through the services; no password (hashing twenty is slow, nobody logs in)."""
    finance = factories.make_group(tenant, "finance")
    people = []
    for index in range(count):
        person = get_user_model().objects.create_user(f"voter_{index:02d}")
        set_tenant_membership(tenant, person, role="reviewer")
        add_group_member(finance, person)
        TOTPDevice.objects.create(user=person, name="default", confirmed=True)
        people.append(person)
    return people


def implied_result(verdicts: list[str]) -> tuple[str, int]:
    """What the votes imply in commit order: the first rejection rejects, the NEEDED-th approval approves.
    Returns the state and how many votes it took."""
    approvals = 0
    for taken, verdict in enumerate(verdicts, start=1):
        if verdict == "reject":
            return State.REJECTED, taken
        approvals += 1
        if approvals == NEEDED:
            return State.APPROVED, taken
    return State.AWAITING_REVIEW, len(verdicts)


MIXES = {
    "mixed": lambda index: "reject" if index % 4 == 3 else "approve",
    "mostly-rejections": lambda index: "approve" if index % 4 == 3 else "reject",
    "all-approve": lambda index: "approve",
    "all-reject": lambda index: "reject",
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mix", MIXES, ids=list(MIXES))
def test_twenty_simultaneous_votes_end_in_the_one_state_their_commit_order_implies(mix):
    tenant = factories.make_tenant()
    agent = factories.make_agent(tenant)
    factories.make_policy(tenant, "refunds", thresholds=[{"group": "finance", "count": NEEDED}])
    voters = finance_members(tenant, THREADS)
    proposal = submit(agent)
    verdicts = [MIXES[mix](index) for index in range(THREADS)]
    codes = [totp_code(person) for person in voters]
    barrier = threading.Barrier(THREADS)
    outcomes: list[str | None] = [None] * THREADS

    def vote(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            cast_vote(
                proposal.id,
                voters[index],
                verdict=verdicts[index],
                step_up=step_up_for(voters[index], codes[index]),
                digest_seen=proposal.action_digest,
                reason=f"no, says voter {index}",
            )
            outcomes[index] = "voted"
        except VoteRefused as refused:
            outcomes[index] = refused.code
        except Exception as error:  # anything else (a deadlock, a conflict) fails the test below
            outcomes[index] = repr(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=vote, args=(index,)) for index in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)

    # Every thread either voted or was told the proposal had closed; nothing else went wrong.
    assert set(outcomes) <= {"voted", "not_open"}, outcomes

    # The commit order of the votes, from the audit chain (appended under the proposal's lock).
    events = AuditEvent.objects.filter(subject=f"proposal:{proposal.id}")
    cast = list(events.filter(verb=Verb.VOTE_CAST).order_by("seq"))
    in_commit_order = [event.data["verdict"] for event in cast]
    expected_state, votes_taken = implied_result(in_commit_order)

    # No vote was recorded after the one that decided; the Vote rows agree with the chain.
    assert len(cast) == votes_taken == outcomes.count("voted")
    rows = Vote.objects.filter(proposal=proposal).select_related("voter").order_by("created_at")
    assert [trail_name(row.voter.username) for row in rows] == [event.actor for event in cast]

    assert expected_state in {State.APPROVED, State.REJECTED}  # twenty voters always decide it
    proposal.refresh_from_db()
    assert proposal.state == expected_state
    finals = events.filter(verb=Verb.PROPOSAL_TRANSITIONED, data__to__in=[State.APPROVED, State.REJECTED])
    assert finals.count() == 1
    decision = Decision.objects.get(proposal=proposal)
    assert decision.kind == ("approved" if expected_state == State.APPROVED else "rejected")
    assert OutboxMessage.objects.filter(proposal=proposal).count() == 1
    assert events.filter(verb=Verb.DECISION_SIGNED).count() == 1
    assert verify_chain(f"tenant:{tenant.id}").ok


@pytest.mark.django_db(transaction=True)
def test_one_code_sent_with_twenty_simultaneous_votes_approves_exactly_one_proposal():
    """The same one-time code on twenty votes at once (twenty proposals, one reviewer). The
    device row is locked while the code is checked and its last used step saved, so exactly one vote
    gets the code; the others are refused as a used code and nothing else is recorded for them."""
    tenant = factories.make_tenant()
    agent = factories.make_agent(tenant)
    factories.make_policy(tenant, "refunds", thresholds=[{"group": "finance", "count": NEEDED}])
    (reviewer,) = finance_members(tenant, 1)
    proposals = [submit(agent) for _ in range(THREADS)]
    code = totp_code(reviewer)
    barrier = threading.Barrier(THREADS)
    outcomes: list[str | None] = [None] * THREADS

    def vote(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            cast_vote(
                proposals[index].id,
                reviewer,
                verdict="approve",
                step_up=step_up_for(reviewer, code),
                digest_seen=proposals[index].action_digest,
            )
            outcomes[index] = "voted"
        except VoteRefused as refused:
            outcomes[index] = refused.code
        except Exception as error:  # anything else fails the test below
            outcomes[index] = repr(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=vote, args=(index,)) for index in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)

    assert outcomes.count("voted") == 1, outcomes
    assert outcomes.count("step_up_failed") == THREADS - 1, outcomes
    assert Vote.objects.filter(voter=reviewer).count() == 1
    assert Vote.objects.get(voter=reviewer).auth_method == "totp"
    refused = AuditEvent.objects.filter(verb=Verb.STEP_UP_FAILED, data__code="step_up_failed")
    assert refused.count() == THREADS - 1
    assert verify_chain(f"tenant:{tenant.id}").ok
