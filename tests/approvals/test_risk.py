"""One risk rank for the queue and for the merge of matching policy versions (approvals/models/risk.py).

Two copies used to disagree: the queue ranked "not rated" with medium, while the merge of matching
versions ranked it below low, so a proposal one version called "low" and another did not rate was
labelled and sorted low. Nobody said it was low: it now merges to "not rated" and sorts with medium.
"""

import pytest

from approvals.models import Proposal, Risk
from approvals.models.risk import RANKS, rank, riskiest
from approvals.policy.validation import version_field_errors
from approvals.web.forms import QueueFilterForm
from tests import factories
from tests.factories import submit

ALLOW = "allow"


@pytest.mark.parametrize(
    "risks, merged",
    [
        (["low", ""], ""),
        (["", "low"], ""),
        (["medium", ""], "medium"),
        (["", "medium"], "medium"),
        (["low", "high", ""], "high"),
        (["low", "low"], "low"),
        ([""], ""),
    ],
)
def test_the_merge_takes_the_level_the_queue_ranks_highest(risks, merged):
    assert riskiest(risks) == merged
    assert rank(riskiest(risks)) == max(rank(risk) for risk in risks)


def test_not_rated_ranks_with_medium_above_low():
    assert rank(Risk.LOW) < rank(Risk.NOT_RATED) == rank(Risk.MEDIUM) < rank(Risk.HIGH)
    assert set(RANKS) == set(Risk)


@pytest.mark.django_db
def test_a_version_that_does_not_rate_keeps_another_versions_low_from_labelling_the_proposal(
    tenant, agent, requester
):
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund", risk="low")
    factories.make_policy(tenant, "everything", tool_pattern="*", thresholds=[{"group": "ops", "count": 1}])

    proposal = Proposal.objects.get(pk=submit(agent).pk)

    assert (proposal.risk, proposal.risk_rank) == ("", rank(Risk.MEDIUM))


@pytest.mark.django_db
def test_two_allowing_versions_merge_to_the_higher_risk(tenant, agent, requester):
    factories.make_policy(tenant, "refunds", tool_pattern="payments.refund", outcome=ALLOW, risk="low")
    factories.make_policy(tenant, "everything", tool_pattern="*", outcome=ALLOW, risk="medium")

    proposal = Proposal.objects.get(pk=submit(agent).pk)

    assert (proposal.risk, proposal.risk_rank) == ("medium", 2)


def test_the_policy_field_the_filter_and_the_levels_are_one_list():
    assert [value for value, _ in QueueFilterForm.RISKS if value] == ["high", "medium", "low"]
    assert "risk" not in version_field_errors({"risk": "medium"}, set())
    assert "risk" in version_field_errors({"risk": "extreme"}, set())
