"""Separation of duties (DESIGN.md): the principal never votes on their own request, a voter must be an
eligible group member when voting and when the quorum is counted, the author of an edit cannot approve
it, and the server clock closes a proposal on every vote, sweeper or not."""

from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.urls import reverse
from django_otp import DEVICE_ID_SESSION_KEY
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts.stepup import step_up_for
from approvals.models import OutboxMessage, Vote
from approvals.services.quorum import count_quorum
from approvals.services.tenants import add_group_member, remove_group_member, remove_tenant_membership
from approvals.services.votes import cast_vote, edit_proposal
from approvals.states import State
from audit.chain.sequencer import sequence_pending
from audit.models import AuditEvent, Verb
from lib.errors import ServiceError
from tests import factories
from tests.factories import fresh_step_up, submit, totp_code

pytestmark = pytest.mark.django_db


def vote(proposal, user, verdict="approve", reason="", **kwargs):
    return cast_vote(
        proposal.id,
        user,
        verdict=verdict,
        digest_seen=proposal.action_digest,
        step_up=step_up_for(user, totp_code(user)),
        reason=reason,
        **kwargs,
    )


def refusal(proposal, user, verdict="approve", reason="because", **kwargs) -> str:
    with pytest.raises(ServiceError) as refused:
        vote(proposal, user, verdict, reason, **kwargs)
    return refused.value.code


def state_of(proposal) -> str:
    proposal.refresh_from_db()
    return proposal.state


def refusals_recorded(proposal) -> list[str]:
    sequence_pending()  # what the on-commit hook does outside the test's transaction
    events = AuditEvent.objects.filter(subject=f"proposal:{proposal.id}", verb=Verb.VOTE_REFUSED)
    return [event.data["code"] for event in events.order_by("seq")]


# ---------------------------------------------------------------------------------------------------
# The principal


@pytest.mark.parametrize("verdict", ["approve", "reject"])
def test_the_principal_never_votes_on_their_own_proposal(agent, refund_policy, requester, verdict):
    proposal = submit(agent, principal_id="requester")

    assert refusal(proposal, requester, verdict) == "self_approval"
    assert state_of(proposal) == State.AWAITING_REVIEW
    assert refusals_recorded(proposal) == ["self_approval"]


def test_the_principal_is_found_by_their_tenant_principal_id_not_their_username(agent, tenant, refund_policy):
    carla = factories.make_user("carla", tenant=tenant, groups=["finance"], principal_id="emp-4711")
    proposal = submit(agent, principal_id="emp-4711")

    assert refusal(proposal, carla) == "self_approval"


def test_a_username_equal_to_the_principal_id_is_not_the_principal(agent, tenant, refund_policy):
    """Only TenantMembership.principal_id maps an agent's principal to a person."""
    namesake = factories.make_user("emp-4711", tenant=tenant, groups=["finance"], principal_id="someone-else")
    proposal = submit(agent, principal_id="emp-4711")

    vote(proposal, namesake)
    assert state_of(proposal) == State.APPROVED


def test_the_principal_may_approve_only_where_every_policy_allows_self_approval(agent, tenant, requester):
    factories.make_policy(
        tenant, "expenses", thresholds=[{"group": "finance", "count": 1}], allow_self_approval=True
    )
    proposal = submit(agent, principal_id="requester")

    vote(proposal, requester)
    assert state_of(proposal) == State.APPROVED


# ---------------------------------------------------------------------------------------------------
# Eligibility at the moment of voting


def test_a_vote_from_someone_outside_every_needed_group_is_refused(
    agent, refund_policy, requester, reviewer_c
):
    proposal = submit(agent)

    assert refusal(proposal, reviewer_c) == "not_eligible"
    assert not Vote.objects.filter(proposal=proposal).exists()
    assert refusals_recorded(proposal) == ["not_eligible"]


def test_compliance_staff_never_vote(agent, refund_policy, requester, compliance):
    proposal = submit(agent)
    assert refusal(proposal, compliance) == "not_eligible"


def test_someone_from_another_tenant_learns_nothing(agent, refund_policy, requester, outsider):
    proposal = submit(agent)
    assert refusal(proposal, outsider) == "not_found"


def test_eligibility_is_decided_by_membership_at_the_moment_of_the_vote(
    agent, tenant, refund_policy, requester, reviewer_c, admin_user
):
    proposal = submit(agent)  # submitted while reviewer_c was not in finance
    finance = tenant.groups.get(slug="finance")
    add_group_member(finance, reviewer_c, actor=admin_user)

    vote(proposal, reviewer_c)
    assert state_of(proposal) == State.APPROVED


def test_a_member_removed_from_the_group_before_voting_is_refused(
    agent, tenant, refund_policy, requester, reviewer_a, admin_user
):
    proposal = submit(agent)
    remove_group_member(tenant.groups.get(slug="finance"), reviewer_a, actor=admin_user)

    assert refusal(proposal, reviewer_a) == "not_eligible"


def test_a_member_removed_before_the_quorum_is_reached_stops_counting(
    agent, tenant, requester, reviewer_a, reviewer_b, reviewer_c, admin_user
):
    factories.make_policy(tenant, "refunds", thresholds=[{"group": "finance", "count": 2}])
    finance = tenant.groups.get(slug="finance")
    proposal = submit(agent)
    vote(proposal, reviewer_a)

    remove_group_member(finance, reviewer_a, actor=admin_user)
    vote(proposal, reviewer_b)

    assert state_of(proposal) == State.AWAITING_REVIEW  # reviewer_a's approval no longer counts
    assert count_quorum(proposal).missing() == [{"group": "finance", "count": 1}]

    add_group_member(finance, reviewer_c, actor=admin_user)
    vote(proposal, reviewer_c)
    assert state_of(proposal) == State.APPROVED
    counted = [v.voter.username for v in count_quorum(proposal).slots["finance"]]
    assert sorted(counted) == ["reviewer_b", "reviewer_c"]


def test_a_member_removed_from_the_tenant_stops_counting(
    agent, tenant, requester, reviewer_a, reviewer_b, admin_user
):
    factories.make_policy(tenant, "refunds", thresholds=[{"group": "finance", "count": 2}])
    proposal = submit(agent)
    vote(proposal, reviewer_a)

    remove_tenant_membership(tenant, reviewer_a, actor=admin_user)
    vote(proposal, reviewer_b)

    assert state_of(proposal) == State.AWAITING_REVIEW


def test_the_author_of_an_edit_cannot_approve_the_edited_proposal(
    agent, refund_policy, requester, reviewer_a, reviewer_b
):
    original = submit(agent)
    edited = edit_proposal(
        original.id,
        reviewer_a,
        arguments={**original.action["arguments"], "amount": "30.00"},
        digest_seen=original.action_digest,
        note="partial refund",
        step_up=fresh_step_up(reviewer_a),
    )

    assert refusal(edited, reviewer_a) == "edit_author"
    vote(edited, reviewer_b)
    assert state_of(edited) == State.APPROVED


# ---------------------------------------------------------------------------------------------------
# Expiry by the server clock


def test_a_vote_one_second_after_expiry_is_refused_and_closes_the_proposal(
    agent, refund_policy, requester, reviewer_a
):
    proposal = submit(agent)
    late = proposal.expires_at + timedelta(seconds=1)

    assert refusal(proposal, reviewer_a, now=late) == "expired"

    assert state_of(proposal) == State.EXPIRED
    assert not Vote.objects.filter(proposal=proposal).exists()
    assert refusals_recorded(proposal) == ["expired"]
    assert OutboxMessage.objects.filter(proposal=proposal, kind=OutboxMessage.Kind.CANCEL).count() == 1


def test_a_vote_one_second_before_expiry_counts(agent, refund_policy, requester, reviewer_a):
    proposal = submit(agent)

    vote(proposal, reviewer_a, now=proposal.expires_at - timedelta(seconds=1))

    assert state_of(proposal) == State.APPROVED


def test_a_vote_at_the_exact_expiry_instant_is_refused(agent, refund_policy, requester, reviewer_a):
    proposal = submit(agent)
    assert refusal(proposal, reviewer_a, now=proposal.expires_at) == "expired"


def test_expiry_uses_the_shortest_ttl_not_the_agents_wish(agent, tenant, requester, reviewer_a):
    factories.make_policy(tenant, "refunds", thresholds=[{"group": "finance", "count": 1}], ttl_seconds=60)
    proposal = submit(agent, expires_at=factories.in_seconds(3600))

    assert refusal(proposal, reviewer_a, now=proposal.created_at + timedelta(seconds=61)) == "expired"


def test_the_reviewer_page_refuses_a_late_vote_by_the_server_clock(
    agent, refund_policy, requester, reviewer_a
):
    """The browser sends no time: the view votes with the server's clock, here one second past expiry."""
    proposal = submit(agent)
    client = Client()
    client.force_login(reviewer_a)
    session = client.session
    session[DEVICE_ID_SESSION_KEY] = TOTPDevice.objects.get(user=reviewer_a).persistent_id
    session.save()
    with time_machine.travel(proposal.expires_at + timedelta(seconds=1), tick=False):
        response = client.post(
            reverse("approvals:decide", kwargs={"proposal_id": proposal.id}),
            {"action": "approve", "digest": proposal.action_digest, "otp_code": totp_code(reviewer_a)},
        )

    assert response.status_code == 403
    assert "Expired" in response.content.decode()
    assert state_of(proposal) == State.EXPIRED
    assert not Vote.objects.filter(proposal=proposal).exists()
