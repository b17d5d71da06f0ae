"""Every kind of decision carries exactly the documented claims, and every approver the documented keys
(CHANGELOG.md, docs/agents/decision-token.md "Claims" and "approvers"): approved by
people, allowed and denied by policy, rejected by a person, a question (needs_info), a break-glass
release. A claim added or dropped in code without the documentation fails here."""

import re
from pathlib import Path

import jwt
import pytest

from accounts.stepup import step_up_for
from approvals.models import Decision
from approvals.services.break_glass import break_glass_release
from approvals.services.votes import cast_vote, request_info
from tests import factories
from tests.factories import submit, totp_code

pytestmark = pytest.mark.django_db

DOCUMENTED_CLAIMS = {
    "iss", "aud", "sub", "jti", "iat", "nbf", "exp", "context_id", "request_id", "proposal_id",
    "action_digest", "action", "replaces", "decision", "reason", "approvers", "quorum", "policy",
    "policies", "tenant", "rev", "consume",
}  # fmt: skip
APPROVER_KEYS = {"sub", "name", "group", "auth", "reason", "reservation"}
# Only a batch member's decision has these (tests/approvals/test_batches.py checks them there).
BATCH_MEMBER_CLAIMS = {"manifest"}
DECISION_TOKEN_DOC = Path(__file__).resolve().parents[2] / "docs" / "agents" / "decision-token.md"


def claims_of(proposal) -> dict:
    return jwt.decode(Decision.objects.get(proposal=proposal).token, options={"verify_signature": False})


def fresh(user):
    return step_up_for(user, totp_code(user))


def waiting_for_finance(agent, tenant):
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 1}]
    )
    return submit(agent)


def voted(proposal, reviewer, **vote):
    cast_vote(proposal.id, reviewer, digest_seen=proposal.action_digest, step_up=fresh(reviewer), **vote)
    return proposal


def approved_by_people(agent, tenant, reviewer_a, **_):
    proposal = waiting_for_finance(agent, tenant)
    reservation = "only because the parcel tracking is lost"
    return voted(proposal, reviewer_a, verdict="approve", reservation=reservation)


def decided_by_policy(outcome):
    def make(agent, tenant, **_):
        factories.make_policy(tenant, "refunds", tool_pattern="payments.refund", outcome=outcome)
        return submit(agent)

    return make


allowed_by_policy = decided_by_policy("allow")
denied_by_policy = decided_by_policy("deny")


def rejected_by_a_person(agent, tenant, reviewer_a, **_):
    return voted(waiting_for_finance(agent, tenant), reviewer_a, verdict="reject", reason="already refunded")


def a_question(agent, tenant, reviewer_a, **_):
    proposal = waiting_for_finance(agent, tenant)
    request_info(
        proposal.id,
        reviewer_a,
        question="Which card?",
        digest_seen=proposal.action_digest,
        step_up=fresh(reviewer_a),
    )
    return proposal


def a_break_glass_release(agent, tenant, reviewer_a, **_):
    factories.make_policy(
        tenant,
        "refunds",
        tool_pattern="payments.refund",
        thresholds=[{"group": "finance", "count": 2}],
        break_glass={
            "people": ["reviewer_a"],
            "per_week": 3,
            "amount_cap": "500.00",
            "currency": "EUR",
            "review_hours": 24,
        },
    )
    proposal = submit(agent)
    break_glass_release(
        proposal.id,
        reviewer_a,
        reason="charged twice right now",
        digest_seen=proposal.action_digest,
        step_up=fresh(reviewer_a),
    )
    return proposal


KINDS = {
    "approved by people": (approved_by_people, "approved"),
    "allowed by policy": (allowed_by_policy, "approved"),
    "denied by policy": (denied_by_policy, "rejected"),
    "rejected by a person": (rejected_by_a_person, "rejected"),
    "needs_info": (a_question, "needs_info"),
    "break-glass": (a_break_glass_release, "approved"),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_of_decision_carries_exactly_the_documented_claims_and_approver_keys(
    kind, agent, tenant, requester, reviewer_a, reviewer_b, reviewer_c, admin_user
):
    make, decision = KINDS[kind]
    claims = claims_of(make(agent=agent, tenant=tenant, reviewer_a=reviewer_a))

    assert set(claims) == DOCUMENTED_CLAIMS
    assert claims["decision"] == decision
    assert claims["approvers"]
    for approver in claims["approvers"]:
        extra = {"break_glass"} if kind == "break-glass" else set()
        assert set(approver) == APPROVER_KEYS | extra, approver
        assert isinstance(approver["reason"], str) and isinstance(approver["reservation"], str)


def test_a_questions_approver_gives_the_question_as_reason_and_no_reservation(
    agent, tenant, requester, reviewer_a
):
    (approver,) = claims_of(a_question(agent=agent, tenant=tenant, reviewer_a=reviewer_a))["approvers"]
    assert (approver["reason"], approver["reservation"], approver["group"]) == ("Which card?", "", None)


def test_a_reservation_is_signed_with_the_approval(agent, tenant, requester, reviewer_a):
    (approver,) = claims_of(approved_by_people(agent=agent, tenant=tenant, reviewer_a=reviewer_a))[
        "approvers"
    ]
    assert approver["reservation"] == "only because the parcel tracking is lost"


def test_a_policys_approver_has_an_empty_reason_and_reservation(agent, tenant, requester):
    (approver,) = claims_of(allowed_by_policy(agent=agent, tenant=tenant))["approvers"]
    assert approver["sub"] == "policy:refunds@1" and (approver["reason"], approver["reservation"]) == ("", "")


def test_the_documented_claims_table_lists_exactly_these_claims():
    text = DECISION_TOKEN_DOC.read_text()
    table = text.split("## Claims", 1)[1].split("###", 1)[0]
    documented = set()
    for row in re.findall(r"^\| (`[^|]+`) \|", table, flags=re.MULTILINE):
        documented.update(re.findall(r"`([a-z_]+)`", row))
    assert documented == DOCUMENTED_CLAIMS | BATCH_MEMBER_CLAIMS
