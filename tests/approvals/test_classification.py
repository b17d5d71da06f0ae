"""Reversibility as a policy input, and a risk hint from the tool's name."""

import pytest

from approvals.models import PolicyVersion
from approvals.policy import classification
from approvals.states import State
from approvals.web.pages import detail_context
from tests import factories
from tests.factories import submit

pytestmark = pytest.mark.django_db

REVERSIBLE = {"effect": "Money back", "reversible": True}


def test_reversibility_is_the_strictest_statement_and_unclassified_counts_as_r2():
    assert classification.reversibility({}, []) == "R2"
    assert classification.reversibility({"reversible": True}, []) == "R2"  # the agent cannot lift it
    assert classification.reversibility({"reversible": True}, ["R1"]) == "R1"
    assert classification.reversibility({"reversibility": "r0"}, ["R3"]) == "R3"
    assert classification.reversibility({"reversible": False}, ["R1"]) == "R3"


def test_the_admins_classification_of_the_tool_reaches_cel(tenant, agent, requester, reviewer_a):
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund")
    factories.make_policy(
        tenant,
        "irreversible-needs-two",
        tool_pattern="payments.*",
        condition='reversibility == "R3"',
        thresholds=[{"group": "finance", "count": 2}],
    )
    assert submit(agent, consequences=REVERSIBLE).requirements["thresholds"] == [
        {"group": "finance", "count": 1}
    ]
    # The admins classify refunds as irreversible (a version whose condition never matches still
    # classifies the tools its patterns name): the agent's "reversible" no longer lowers it.
    factories.make_policy(
        tenant,
        "classify",
        tool_pattern="payments.refund",
        outcome="deny",
        condition="false",
        reversibility="R3",
    )
    proposal = submit(agent, consequences=REVERSIBLE)
    assert proposal.reversibility == "R3"
    assert proposal.requirements["thresholds"] == [{"group": "finance", "count": 2}]


def test_the_tenant_default_asks_two_admins_for_an_irreversible_action(agent, requester):
    irreversible = submit(agent, consequences={"effect": "Money leaves", "reversible": False})
    reversible = submit(agent, consequences=REVERSIBLE)
    assert irreversible.requirements["thresholds"] == [{"group": "admins", "count": 2}]
    assert reversible.requirements["thresholds"] == [{"group": "admins", "count": 1}]


def test_the_risk_hint_follows_the_plugins_keyword_groups():
    assert classification.risk_hint("ops.run_command") == "shell or command execution"
    assert classification.risk_hint("fs.create_file") == "file write"
    assert classification.risk_hint("crm.http_post") == "external API write"
    assert classification.risk_hint("weather.lookup") == ""


def test_a_hinted_tool_no_policy_names_is_never_allowed_by_a_catch_all(tenant, agent, requester, reviewer_a):
    factories.make_policy(
        tenant, "catch-all", tool_pattern="*", outcome=PolicyVersion.Outcome.ALLOW, thresholds=[]
    )
    harmless = submit(agent, action={"tool": "weather.lookup", "arguments": {"city": "Oslo"}})
    hinted = submit(agent, action={"tool": "ops.shell_exec", "arguments": {"command": "rm -rf /tmp/x"}})
    assert harmless.state == State.ALLOWED
    assert hinted.state == State.AWAITING_REVIEW and hinted.risk == "high"
    why = detail_context(hinted, reviewer_a, {})["why"]
    assert why["risk_hint"] == "shell or command execution"
