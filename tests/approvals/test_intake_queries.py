"""Intake costs a constant, small number of queries: the same for the first proposal and the fiftieth,
with one policy or twenty, and CEL programs are compiled once, not per proposal."""

import cel
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.models import PolicyVersion
from approvals.policy.evaluation import compile_condition
from tests import factories
from tests.factories import submit

pytestmark = pytest.mark.django_db

# Exactly, per path: one query locks the tenant's and the agent's quota rows (approvals/services/quotas.py),
# one reads the replay check, the halt check, the open-proposal counts, the target's history and the
# active policy versions (approvals/services/intake/read.py hold_and_read); on PostgreSQL the two go in one
# execute. Then the writes, which read nothing back: the quota spend (one UPDATE of both buckets), the
# proposal, already evaluated, with its pinned versions, its audit events (3 to review, 4 to allow or deny,
# in one INSERT with their places in the sequencer's queue: audit/trail.py recorded_together), and to
# review the review notice and the follow-up row the worker chases it by (approvals/notify/chase.py), to
# allow or deny the decision. On PostgreSQL the writes held by lib/storage/held_writes.py go in one round trip
# each side of the review notice's or the decision's INSERT (the ORM's, a statement of its own). An agent
# Reviewer pushes to also gets its decision's outbox row (its id is read back) and the worker's NOTIFY,
# which send the writes held before them first. Plus the transaction's savepoint and release (a test runs
# inside a transaction). No mail, no per-reviewer or per-policy query.
POSTGRES = {"review": 4, "allow": 7, "deny": 7, "allow (pull agent)": 4}
# SQLite: each write its own statement (the proposal and its pins two, the events and their queue rows two).
SQLITE = {"review": 11, "allow": 11, "deny": 11, "allow (pull agent)": 10}
ACTIONS = {
    "review": {"tool": "payments.refund", "arguments": {"order_id": "1", "amount": "5.00"}},
    "allow": {"tool": "tickets.close", "arguments": {"id": "7"}},
    "deny": {"tool": "db.drop", "arguments": {"table": "users"}},
    "allow (pull agent)": {"tool": "tickets.close", "arguments": {"id": "7"}},
}


def queries_for_intake(agent, action) -> int:
    with CaptureQueriesContext(connection) as captured:
        submit(agent, action=action)
    return len(captured)


@pytest.mark.parametrize("path", list(ACTIONS))
def test_intake_makes_a_constant_number_of_queries(
    django_assert_num_queries, tenant, agent, refund_policy, requester, reviewer_a, path
):
    if path == "allow (pull agent)":
        # An agent that reads its decision by pull (no card URL): no outbox row, no NOTIFY.
        agent = factories.make_agent(tenant, slug="puller", api_token="puller-secret", card_url="")
    factories.make_policy(tenant, "tickets", tool_pattern="tickets.*", outcome=PolicyVersion.Outcome.ALLOW)
    factories.make_policy(tenant, "no-drops", tool_pattern="db.drop", outcome=PolicyVersion.Outcome.DENY)
    submit(agent)  # the first intake of a tenant creates its chain head
    first = queries_for_intake(agent, ACTIONS[path])
    assert first == (POSTGRES if connection.vendor == "postgresql" else SQLITE)[path]

    for number in range(20):  # more policies, some matching with conditions, and more proposals
        factories.make_policy(
            tenant,
            f"extra-{number}",
            tool_pattern="payments.*" if number % 2 else "crm.*",  # leave the allow and deny paths alone
            condition=f"size(tool) > {number}",
            thresholds=[{"group": "finance", "count": 1}],
        )
    for _ in range(30):
        submit(agent)
    with django_assert_num_queries(first):
        submit(agent, action=ACTIONS[path])


def test_a_condition_is_compiled_once_for_many_proposals(monkeypatch, tenant, agent, requester):
    factories.make_policy(tenant, "big-refunds", condition="double(args.amount) > 100.0")
    compiled = []
    real = cel.compile
    # Counts the compilations, then compiles: append() is None, so `or` goes on to the real call.
    monkeypatch.setattr(
        cel,
        "compile",
        lambda source: compiled.append(source) or real(source),  # type: ignore[func-returns-value]
    )
    compile_condition.cache_clear()
    for amount in ("150.00", "5.00", "500.00"):
        submit(agent, action={"tool": "payments.refund", "arguments": {"order_id": "9", "amount": amount}})
    assert compiled == ["double(args.amount) > 100.0"]
