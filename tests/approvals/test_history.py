"""Earlier proposals on the same target are visible, and policies can count them."""

import pytest

from approvals.models import PolicyVersion
from approvals.policy import history
from approvals.services.votes import edit_proposal
from approvals.states import State
from approvals.web.pages import detail_context
from tests import factories
from tests.factories import approve, step_up_for, submit, totp_code

pytestmark = pytest.mark.django_db


def test_the_target_is_the_tool_and_what_it_acts_on():
    assert history.target_key(factories.refund_action("1182")) == "payments.refund|order:1182"
    assert history.target_key({"tool": "mail.send", "arguments": {"to": "a@example.test"}}) == (
        "mail.send|to:a@example.test"
    )
    assert history.target_key({"tool": "status.read", "arguments": {}}) == ""


def test_an_earlier_approval_on_the_same_order_makes_a_likely_duplicate(
    agent, refund_policy, requester, reviewer_a, reviewer_b
):
    first, _ = approve(agent, reviewer_b)
    other_order = submit(agent, action=factories.refund_action("9999"))
    again = submit(agent)  # the same order, another task: the demo client's re-sent refund
    context = detail_context(again, reviewer_a, {})
    assert context["history"]["likely_duplicate"]["proposal"] == first
    assert context["history"]["likely_duplicate"]["approvers"] == ["Bob"]
    assert [item["proposal"] for item in context["history"]["items"]] == [first]
    assert detail_context(other_order, reviewer_a, {})["history"]["items"] == []


def test_an_edit_lists_the_proposal_it_replaced_as_its_earlier_version_never_as_a_duplicate(
    agent, refund_policy, requester, reviewer_a, reviewer_b
):
    """The page shows the request's own earlier version (a reviewer of the edit wants it beside the rest);
    the policy's counts leave it out, as the same request is not history of itself."""

    original = submit(agent)
    edited = edit_proposal(
        original.id,
        reviewer_b,
        arguments={**original.action["arguments"], "amount": "30.00"},
        digest_seen=original.action_digest,
        step_up=step_up_for(reviewer_b, totp_code(reviewer_b)),
    )
    panel = detail_context(edited, reviewer_a, {})["history"]
    assert [(item["proposal"], item["earlier_version"]) for item in panel["items"]] == [(original, True)]
    assert panel["likely_duplicate"] is None
    assert history.policy_counts(edited)["count_24h"] == 0


def test_a_policy_can_deny_a_refund_the_same_order_already_had(
    tenant, agent, refund_policy, requester, reviewer_a
):
    factories.make_policy(
        tenant,
        "no-second-refund",
        outcome=PolicyVersion.Outcome.DENY,
        tool_pattern="payments.refund",
        condition="history.count_released_24h > 0",
    )
    first, _ = approve(agent, reviewer_a)
    assert first.state == State.APPROVED
    assert submit(agent).state == State.DENIED
    assert submit(agent, action=factories.refund_action("1183")).state == State.AWAITING_REVIEW
