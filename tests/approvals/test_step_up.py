"""Step-up (DESIGN.md "Separation of duties and step-up"): per_vote needs a fresh one-time code on every
vote, each code usable once; a window policy accepts a signed step-up time in the session younger than
the window. Failures are throttled by django-otp and every one is an audit event."""

from datetime import timedelta

import pytest
import time_machine
from django.contrib.sessions.backends.db import SessionStore
from django.utils import timezone
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts import stepup
from accounts.stepup import step_up_for
from approvals.models import Vote
from approvals.services.votes import cast_vote
from approvals.states import State
from audit.models import AuditEvent, Verb
from lib.errors import VoteRefused
from tests import factories
from tests.factories import submit, totp_code

pytestmark = pytest.mark.django_db


def cast(proposal, user, *, code="", session=None):
    return cast_vote(
        proposal.id,
        user,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(user, code, session),
    )


def refusal(proposal, user, **kwargs) -> str:
    with pytest.raises(VoteRefused) as refused:
        cast(proposal, user, **kwargs)
    return refused.value.code


def step_up_failures(proposal) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(subject=f"proposal:{proposal.id}", verb=Verb.STEP_UP_FAILED))


def wrong_code_for(user) -> str:
    right = totp_code(user)
    return f"{(int(right) + 1) % 1_000_000:06d}"


@pytest.fixture
def window_policy(tenant):
    """Refunds approved with a step-up no older than five minutes."""
    return factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        step_up="300",
        thresholds=[{"group": "finance", "count": 1}],
    )


@pytest.fixture
def session():
    return SessionStore()


# ---------------------------------------------------------------------------------------------------
# per_vote


def test_per_vote_refuses_a_vote_without_a_code_and_records_it(agent, refund_policy, requester, reviewer_a):
    proposal = submit(agent)

    assert refusal(proposal, reviewer_a) == "step_up_required"
    assert not Vote.objects.filter(proposal=proposal).exists()
    assert [e.data["code"] for e in step_up_failures(proposal)] == ["step_up_required"]


def test_per_vote_refuses_a_wrong_code_and_records_it_without_the_code(
    agent, refund_policy, requester, reviewer_a
):
    proposal = submit(agent)
    wrong = wrong_code_for(reviewer_a)

    assert refusal(proposal, reviewer_a, code=wrong) == "step_up_failed"
    failures = step_up_failures(proposal)
    assert [e.data["code"] for e in failures] == ["step_up_failed"]
    assert wrong not in str(failures[0].data)


def test_per_vote_accepts_a_fresh_code(agent, refund_policy, requester, reviewer_a):
    proposal = submit(agent)

    vote = cast(proposal, reviewer_a, code=totp_code(reviewer_a))

    assert vote.auth_method == "totp"
    proposal.refresh_from_db()
    assert proposal.state == State.APPROVED


def test_a_code_is_usable_once(agent, refund_policy, requester, reviewer_a):
    first, second = submit(agent), submit(agent)
    code = totp_code(reviewer_a)
    cast(first, reviewer_a, code=code)

    assert refusal(second, reviewer_a, code=code) == "step_up_failed"


def test_per_vote_ignores_a_fresh_session_step_up(agent, refund_policy, requester, reviewer_a, session):
    proposal = submit(agent)
    stepup.mark_fresh(session)

    assert refusal(proposal, reviewer_a, session=session) == "step_up_required"


def test_failed_codes_are_throttled_so_even_the_right_code_waits(agent, refund_policy, requester, reviewer_a):
    proposal = submit(agent)
    assert refusal(proposal, reviewer_a, code=wrong_code_for(reviewer_a)) == "step_up_failed"

    # django-otp now refuses every code for a while (1 s, then 2 s, 4 s, ...), the right one included.
    assert refusal(proposal, reviewer_a, code=totp_code(reviewer_a)) == "step_up_failed"

    device = TOTPDevice.objects.get(user=reviewer_a)
    assert device.throttling_failure_count >= 1
    assert len(step_up_failures(proposal)) == 2


def test_a_backup_code_also_steps_up_once(agent, refund_policy, requester, reviewer_a):
    from django_otp.plugins.otp_static.models import StaticDevice

    device = StaticDevice.objects.create(user=reviewer_a, name="backup", confirmed=True)
    device.token_set.create(token="backup-1234")
    first, second = submit(agent), submit(agent)

    assert cast(first, reviewer_a, code="backup-1234").auth_method == "backup_code"
    assert refusal(second, reviewer_a, code="backup-1234") == "step_up_failed"


# ---------------------------------------------------------------------------------------------------
# A freshness window


def test_window_mode_accepts_a_step_up_younger_than_the_window(
    agent, window_policy, requester, reviewer_a, session
):
    proposal = submit(agent)
    stepup.mark_fresh(session)

    vote = cast(proposal, reviewer_a, session=session)

    assert vote.auth_method == "session_step_up_300s"
    proposal.refresh_from_db()
    assert proposal.state == State.APPROVED


def test_window_mode_refuses_a_step_up_older_than_the_window(
    agent, window_policy, requester, reviewer_a, session
):
    proposal = submit(agent)
    with time_machine.travel(timezone.now() - timedelta(seconds=360), tick=False):  # six minutes ago
        stepup.mark_fresh(session)

    assert refusal(proposal, reviewer_a, session=session) == "step_up_required"
    assert [e.data["code"] for e in step_up_failures(proposal)] == ["step_up_required"]


def test_window_mode_refuses_a_forged_step_up(agent, window_policy, requester, reviewer_a, session):
    proposal = submit(agent)
    session[stepup.SESSION_KEY] = "session:1abcde:forged-signature"

    assert refusal(proposal, reviewer_a, session=session) == "step_up_required"


def test_window_mode_refuses_a_session_that_never_stepped_up(
    agent, window_policy, requester, reviewer_a, session
):
    proposal = submit(agent)
    assert refusal(proposal, reviewer_a, session=session) == "step_up_required"


def test_a_code_in_window_mode_counts_and_starts_the_window(
    agent, window_policy, requester, reviewer_a, session
):
    first, second = submit(agent), submit(agent)

    cast(first, reviewer_a, code=totp_code(reviewer_a), session=session)
    vote = cast(second, reviewer_a, session=session)  # no code: the window the first vote opened

    assert vote.auth_method == "session_step_up_300s"
