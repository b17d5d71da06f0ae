"""approvals/storage/history.py: a target's counts read in plain SQL (what intake reads as `history`,
policy.history.policy_counts_expression) equal its ORM twin (policy.history.policy_counts), state by
state. Run on SQLite and on PostgreSQL (DATABASE_URL)."""

import pytest

from approvals.models import Agent, Proposal
from approvals.policy import history
from approvals.states import State
from tests import factories
from tests.factories import submit

pytestmark = pytest.mark.django_db


def test_the_plain_sql_counts_equal_what_policy_counts_counts(agent, refund_policy, requester):
    states = [State.SUCCEEDED, State.SUCCEEDED, State.EXECUTING, State.ALLOWED, State.DENIED]
    states += [State.REJECTED, State.AWAITING_REVIEW, State.FAILED, State.EXPIRED]
    for state in states:
        earlier = submit(agent)
        Proposal.objects.filter(pk=earlier.pk).update(state=state)  # setup: a history of every kind
    same_task = submit(agent, task_id="task-now")  # the request's own task is not its history
    Proposal.objects.filter(pk=same_task.pk).update(state=State.SUCCEEDED)
    submit(agent, action=factories.refund_action("other-order"))  # another target

    def in_one_query(proposal):
        expression = history.policy_counts_expression(proposal)
        if expression is None:
            return history.read_policy_counts(None)
        row = Agent.objects.filter(pk=agent.pk).annotate(counts=expression).values_list("counts", flat=True)
        return history.read_policy_counts(row.get())

    def new_request(action):
        return Proposal(
            tenant=agent.tenant, agent=agent, task_id="task-now", tool=action["tool"],
            target_key=history.target_key(action),
        )  # fmt: skip

    now = new_request(factories.refund_action())
    expected = history.policy_counts(now)
    assert expected == {
        "count_24h": 9,
        "count_succeeded_24h": 2,
        "count_released_24h": 5,  # allowed, executing, succeeded twice, failed
        "count_rejected_24h": 2,
        "count_open": 1,
    }
    assert in_one_query(now) == expected
    fresh = new_request(factories.refund_action("never-seen"))
    assert in_one_query(fresh) == history.policy_counts(fresh) == dict.fromkeys(history.POLICY_COUNTS, 0)
    untargeted = new_request({"tool": "status.read", "arguments": {}})
    assert in_one_query(untargeted) == history.policy_counts(untargeted)
