"""Concurrency: two reviewers vote on a batch (two approvals needed) at the moment the agent withdraws a
member. The batch row is locked first by each of the three, so they serialize, and whatever their commit
order, no member is approved on votes given for another manifest than the one it ends in: either both
votes came first (every member approved under the manifest submitted, the withdrawal refused), or the
withdrawal counted and no member was approved (a vote before it was voided, a vote after it named the
old manifest and was refused).

Staged with real threads, each on its own database connection, released together by a barrier."""

import pytest
from django.conf import settings

from accounts.stepup import step_up_for
from approvals.canonical import manifest_digest
from approvals.models import Batch, BatchMember, Decision, Proposal, Vote
from approvals.schemas import ApprovalRequest
from approvals.services.batches import cast_batch_vote, submit_batch, withdraw_member
from approvals.states import State
from lib.errors import ServiceError
from tests import factories
from tests.concurrency import run_together
from tests.factories import approval_request, refund_action, totp_code

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        not settings.IS_POSTGRES,
        reason="row locks and real concurrent connections need PostgreSQL (set DATABASE_URL)",
    ),
]

MEMBERS = 4


def the_batch(agent) -> Batch:
    members = [
        ApprovalRequest.model_validate(
            approval_request(
                action=refund_action(order_id=str(100 + i)),
                request_id=f"refund-{100 + i}",
                consequences={"reversible": True},
            )
        )
        for i in range(MEMBERS)
    ]
    batch, _ = submit_batch(
        agent,
        task_id="task-race",
        context_id="",
        batch_id="race",
        summary="",
        members=members,
        manifest=manifest_digest([m.action_digest for m in members]),
    )
    return batch


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(4))
def test_votes_racing_a_withdrawal_never_approve_a_member_on_another_manifest(attempt):
    tenant = factories.make_tenant()
    agent = factories.make_agent(tenant)
    factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        thresholds=[{"group": "finance", "count": 2}],
        batch={"max_members": 10},
    )
    alice = factories.make_user("alice", tenant=tenant, groups=["finance"])
    bob = factories.make_user("bob", tenant=tenant, groups=["finance"])
    batch = the_batch(agent)
    seen = batch.manifest_digest
    alice_step, bob_step = step_up_for(alice, totp_code(alice)), step_up_for(bob, totp_code(bob))

    vote_a, vote_b, withdrawal = run_together(
        lambda: cast_batch_vote(batch.pk, alice, verdict="approve", manifest_seen=seen, step_up=alice_step),
        lambda: cast_batch_vote(batch.pk, bob, verdict="approve", manifest_seen=seen, step_up=bob_step),
        lambda: withdraw_member(agent, batch.pk, "refund-101"),
    )

    batch.refresh_from_db()
    approved = Proposal.objects.filter(state=State.APPROVED)
    if isinstance(withdrawal, ServiceError):
        # Both votes committed before the withdrawal: every member approved under the submitted manifest.
        assert withdrawal.code == "not_withdrawable"
        assert not isinstance(vote_a, Exception) and not isinstance(vote_b, Exception)
        assert approved.count() == MEMBERS
        assert batch.manifest_digest == seen
    else:
        # The withdrawal counted: no member was approved; what is left waits on the new manifest, with no
        # vote given for the old one.
        assert approved.count() == 0
        assert batch.manifest_digest != seen
        for outcome in (vote_a, vote_b):
            assert not isinstance(outcome, Exception) or getattr(outcome, "code", None) == "stale_manifest", (
                outcome
            )
        waiting = Proposal.objects.filter(batch_member__standing=BatchMember.Standing.IN)
        assert set(waiting.values_list("state", flat=True)) == {State.AWAITING_REVIEW}
        assert set(waiting.values_list("manifest_digest", flat=True)) == {batch.manifest_digest}
        assert not Vote.objects.filter(proposal__in=waiting).exists()
        assert Proposal.objects.get(request_id="refund-101").state == State.CANCELLED
    for decision in Decision.objects.filter(kind=Decision.Kind.APPROVED).select_related("proposal"):
        assert decision.proposal.manifest_digest == batch.manifest_digest
