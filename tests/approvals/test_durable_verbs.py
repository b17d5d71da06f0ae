"""A top-level verb is its own transaction: a caller that wraps it in a transaction of its own is refused
before anything is written, so a vote's commit (and the broadcast, the audit sequencing and the direct
send it schedules) never waits on a caller's larger transaction."""

import pytest
from django.db import transaction

from approvals.models import Vote
from approvals.services.halts import resume
from approvals.services.votes import cast_vote
from tests.factories import step_up_for, submit, totp_code

pytestmark = pytest.mark.django_db


def test_a_vote_inside_a_callers_transaction_is_refused_and_writes_nothing(agent, refund_policy, reviewer_a):
    proposal = submit(agent)
    with pytest.raises(RuntimeError, match="durable"), transaction.atomic():
        cast_vote(
            proposal.id,
            reviewer_a,
            verdict="approve",
            digest_seen=proposal.action_digest,
            step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
        )
    assert not Vote.objects.filter(proposal=proposal).exists()


def test_a_resume_inside_a_callers_transaction_is_refused(admin_user):
    with pytest.raises(RuntimeError, match="durable"), transaction.atomic():
        resume(actor=admin_user, everything=True)
