"""A target is what an action acts on, not how the agent spells it: the REST agent's `order_id=1182`
and the A2A agent's `order:1182` are one order; the admins' classification may name a tool's target
argument and declare tools equivalent; history, the duplicate warning and CEL `history` use it."""

import pytest

from approvals.policy import history
from approvals.states import State
from approvals.web.pages import detail_context
from tests import factories
from tests.factories import approve, submit

pytestmark = pytest.mark.django_db


def _rest_spelling(order_id="1182", tool="payments.refund"):
    """The REST agent: no `target`, the order only in the arguments."""
    return {"tool": tool, "arguments": {"order_id": order_id, "amount": "40.00", "currency": "EUR"}}


@pytest.mark.parametrize(
    "spelling",
    [
        {"target": "order:1182"},
        {"target": "order_id=1182"},
        {"target": "Order #1182"},
        {"target": " ORDER:1182 "},
        {},
    ],
)
def test_every_spelling_of_one_order_is_one_target(spelling):
    action = {**_rest_spelling(), **spelling}
    assert history.target_key(action) == "payments.refund|order:1182"


def test_other_things_keep_their_kind():
    assert history.target_key({"tool": "mail.send", "arguments": {"to": "A@Example.test "}}) == (
        "mail.send|to:a@example.test"
    )
    assert history.target_key({"tool": "status.read", "arguments": {}}) == ""
    assert history.target_key({"tool": "web.fetch", "target": "https://example.test/a"}) == (
        "web.fetch|https://example.test/a"
    )


def test_a_re_refund_over_rest_is_flagged_after_the_a2a_refund_succeeded(
    agent, refund_policy, requester, reviewer_a, reviewer_b
):
    first, decision = approve(agent, reviewer_b)  # the A2A spelling: target "order:1182"
    again = submit(agent, action=_rest_spelling())
    context = detail_context(again, reviewer_a, {})
    assert context["history"]["likely_duplicate"]["proposal"] == first
    assert context["history"]["target"] == "order:1182"


def test_tools_the_admins_declare_equivalent_share_a_history(
    tenant, agent, requester, reviewer_a, reviewer_b
):
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.*", thresholds=[{"group": "finance", "count": 1}]
    )
    factories.make_policy(
        tenant,
        "same-money",
        tool_pattern="payments.*",
        outcome="deny",
        condition="false",
        equivalent_tools=["payments.refund", "payments.credit"],
    )
    first, _ = approve(agent, reviewer_b)
    credit = submit(agent, action=_rest_spelling(tool="payments.credit"))
    assert credit.target_key == first.target_key
    assert detail_context(credit, reviewer_a, {})["history"]["likely_duplicate"]["proposal"] == first
    unrelated = submit(agent, action=_rest_spelling(tool="payments.capture"))
    assert unrelated.target_key != first.target_key


def test_the_admins_may_name_the_argument_that_holds_the_target(tenant, agent, requester):
    factories.make_policy(
        tenant, "mail", tool_pattern="mail.send", thresholds=[{"group": "finance", "count": 1}],
        target_argument="recipient",
    )  # fmt: skip
    action = {"tool": "mail.send", "arguments": {"to": "team@example.test", "recipient": "Dana@Example.test"}}
    assert submit(agent, action=action).target_key == "mail.send|recipient:dana@example.test"


def test_cel_history_counts_the_other_spelling(tenant, agent, requester, reviewer_b):
    factories.make_policy(
        tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 1}]
    )
    factories.make_policy(
        tenant,
        "no-second-refund",
        tool_pattern="payments.refund",
        outcome="deny",
        condition="history.count_released_24h > 0",
    )
    approve_first = submit(agent)  # waits for review: not released yet
    assert approve_first.state == State.AWAITING_REVIEW
    from approvals.services.votes import cast_vote
    from tests.factories import fresh_step_up

    cast_vote(
        approve_first.id,
        reviewer_b,
        verdict="approve",
        digest_seen=approve_first.action_digest,
        step_up=fresh_step_up(reviewer_b),
    )
    again = submit(agent, action=_rest_spelling())
    assert again.state == State.DENIED
