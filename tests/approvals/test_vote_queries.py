"""A vote reads what it decides on once: the proposal's threshold groups and the slots the voter may
fill in them are read for its eligibility, its "voice already taken" check and the groups it counts in,
one time in all (approvals/selectors VoterSlots), whoever votes and however many members the groups have."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.services.votes import cast_vote
from audit.people import pseudonym_of
from lib import base64url
from tests import factories

pytestmark = pytest.mark.django_db

# The final vote of a one-approver policy, for an agent Reviewer pushes to: the proposal's lock and the
# voter's role (once: the lock's outsider check keeps it for the eligibility), the halt, the principal
# check, the groups (once: the quorum counts in the same ones), the voter's memberships and stand-in row
# (once), one "already voted" check (the person's own vote and any cast in their voice), the vote, its
# audit event and the voter's pseudonym (read, then written in a savepoint the first time; the signed
# decision names the voter with it, not read again), the quorum's reads, the transition, the policy
# versions the decision names, the decision, their audit events, the outbox row and the worker's NOTIFY,
# and the test's savepoint and release.
QUERIES = {"postgresql": 27, "sqlite": 29}  # SQLite: no NOTIFY, and each audit INSERT is two


def test_a_final_vote_reads_its_voters_groups_once(agent, refund_policy, requester, reviewer_a):
    for number in range(5):  # more members in the group change nothing
        factories.make_user(f"finance-{number}", tenant=agent.tenant, groups=["finance"])
    factories.submit(agent)  # the tenant's chain head exists from here on
    proposal = factories.submit(agent, action=factories.refund_action(order_id="9"))
    step = factories.fresh_step_up(reviewer_a)
    with CaptureQueriesContext(connection) as captured:
        cast_vote(
            proposal.id, reviewer_a, verdict="approve", digest_seen=proposal.action_digest, step_up=step
        )
    # the voter's stand-in row: once, not once per question
    assert _count(captured, 'FROM "approvals_standin" WHERE ("approvals_standin"."proposal_id"') == 1
    assert (
        _count(captured, 'FROM "approvals_tenantmembership" WHERE ("approvals_tenantmembership"."user_id"')
        == 1
    )
    assert _count(captured, 'FROM "approvals_approvergroup"') == 1
    assert _count(captured, 'FROM "audit_persondirectoryentry"') == 1
    assert len(captured) == QUERIES[connection.vendor]


def _count(captured, fragment: str) -> int:
    return sum(fragment in query["sql"] for query in captured)


def test_the_decision_of_a_three_approver_quorum_reads_the_approvers_pseudonyms_together(
    agent, requester, reviewer_a, reviewer_b
):
    """The signed decision names each approver by pseudonym: the final voter's own is kept from its vote's
    event, the other two are read in one query (audit.people.read_pseudonyms), not one each."""
    factories.make_policy(agent.tenant, "three", thresholds=[{"group": "finance", "count": 3}])
    third = factories.make_user("finance-3", tenant=agent.tenant, groups=["finance"])
    proposal = factories.submit(agent)
    for voter in (reviewer_a, reviewer_b):
        cast_vote(
            proposal.id,
            voter,
            verdict="approve",
            digest_seen=proposal.action_digest,
            step_up=factories.fresh_step_up(voter),
        )
    step = factories.fresh_step_up(third)
    with CaptureQueriesContext(connection) as captured:
        cast_vote(proposal.id, third, verdict="approve", digest_seen=proposal.action_digest, step_up=step)
    assert _count(captured, 'FROM "audit_persondirectoryentry"') == 2
    proposal.refresh_from_db()
    claims = json.loads(base64url.decode(proposal.decision.token.split(".")[1]))
    named = {pseudonym_of(person) for person in (reviewer_a, reviewer_b, third)}
    assert set(claims["quorum"]["approved_by"]) == named
    assert {approver["sub"] for approver in claims["approvers"]} == named
