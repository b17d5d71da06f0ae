"""The whole state table through `services.lifecycle.transition`: every allowed move works (rev bumped,
audited), every other raises IllegalTransition and changes nothing; a stale proposal object raises
Conflict."""

from itertools import product

import pytest
from django.db import transaction

from approvals.models import Proposal
from approvals.services.lifecycle import transition
from approvals.states import ALLOWED, RELEASED, TERMINAL, IllegalTransition, State
from audit.models import AuditEvent, Verb
from lib.errors import Conflict
from tests.factories import submit

pytestmark = pytest.mark.django_db

LEGAL = sorted((source, target) for source, targets in ALLOWED.items() for target in targets)
ILLEGAL = sorted(
    (source, target)
    for source, target in product(State.values, State.values)
    if target not in ALLOWED[source]
)


@pytest.fixture
def proposal_in(agent):
    """A stored proposal put straight into a state (arrangement only: the state under test)."""

    def make(state: str) -> Proposal:
        proposal = submit(agent)
        Proposal.objects.filter(pk=proposal.pk).update(state=state)
        proposal.refresh_from_db()
        return proposal

    return make


def move(proposal: Proposal, target: str) -> Proposal:
    with transaction.atomic():
        return transition(proposal, target, actor="system", reason="table test")


def test_the_table_names_every_state_once():
    assert set(ALLOWED) == set(State.values)
    assert all(targets <= set(State.values) for targets in ALLOWED.values())


def test_terminal_states_are_exactly_the_ones_designed_terminal():
    assert TERMINAL == {
        State.DENIED,
        State.REJECTED,
        State.EXPIRED,
        State.REVOKED,
        State.CANCELLED,
        State.SUPERSEDED,
        State.SUCCEEDED,
        State.FAILED,
    }


def test_released_decisions_can_be_stopped_by_revocation_and_expiry_whoever_released_them():
    # DESIGN.md lists allowed → executing only; halts and expiry must stop policy-allowed decisions too.
    for state in RELEASED:
        assert {State.EXECUTING, State.REVOKED, State.EXPIRED} == ALLOWED[state]


def test_unknown_settles_only_to_succeeded_or_failed():
    assert ALLOWED[State.UNKNOWN] == {State.SUCCEEDED, State.FAILED}


@pytest.mark.parametrize("source, target", LEGAL, ids=[f"{s}->{t}" for s, t in LEGAL])
def test_allowed_transition_works(proposal_in, source, target):
    proposal = proposal_in(source)
    rev = proposal.rev

    move(proposal, target)

    stored = Proposal.objects.get(pk=proposal.pk)
    assert stored.state == target
    assert stored.rev == rev + 1
    event = AuditEvent.objects.filter(
        verb=Verb.PROPOSAL_TRANSITIONED, subject=f"proposal:{proposal.id}"
    ).last()
    assert event is not None
    assert (event.data["from"], event.data["to"], event.data["rev"]) == (source, target, rev + 1)


@pytest.mark.parametrize("source, target", ILLEGAL, ids=[f"{s}->{t}" for s, t in ILLEGAL])
def test_every_other_transition_is_illegal(proposal_in, source, target):
    proposal = proposal_in(source)
    rev = proposal.rev
    events = AuditEvent.objects.count()

    with pytest.raises(IllegalTransition) as refused:
        move(proposal, target)

    assert (refused.value.current, refused.value.target) == (source, target)
    stored = Proposal.objects.get(pk=proposal.pk)
    assert (stored.state, stored.rev) == (source, rev)
    assert AuditEvent.objects.count() == events


def test_timestamps_follow_the_state(proposal_in):
    proposal = proposal_in(State.AWAITING_REVIEW)
    move(proposal, State.APPROVED)
    move(proposal, State.EXECUTING)
    move(proposal, State.SUCCEEDED)

    stored = Proposal.objects.get(pk=proposal.pk)
    assert stored.decided_at and stored.executing_since and stored.settled_at
    assert stored.decided_at <= stored.executing_since <= stored.settled_at


def test_a_stale_proposal_object_raises_conflict(proposal_in):
    fresh = proposal_in(State.AWAITING_REVIEW)
    stale = Proposal.objects.get(pk=fresh.pk)
    move(fresh, State.APPROVED)

    with pytest.raises(Conflict) as refused:
        move(stale, State.REJECTED)

    assert refused.value.code == "concurrent_change"
    assert Proposal.objects.get(pk=fresh.pk).state == State.APPROVED


def test_a_stale_rev_in_the_same_state_raises_conflict(proposal_in):
    """Two writers that both read `approved`: the first moves it on and back is impossible, so fake the
    other writer's bump of rev alone; the compare-and-set covers rev, not only state."""
    proposal = proposal_in(State.APPROVED)
    Proposal.objects.filter(pk=proposal.pk).update(rev=proposal.rev + 1)

    with pytest.raises(Conflict):
        move(proposal, State.EXECUTING)

    assert Proposal.objects.get(pk=proposal.pk).state == State.APPROVED


@pytest.mark.django_db(transaction=True)
def test_transition_refuses_to_run_outside_a_transaction(proposal_in):
    proposal = proposal_in(State.AWAITING_REVIEW)

    with pytest.raises(RuntimeError, match="inside a transaction"):
        transition(proposal, State.APPROVED, actor="system")

    assert Proposal.objects.get(pk=proposal.pk).state == State.AWAITING_REVIEW
