"""Queue metrics from the audit log: outcome rates by policy version and tool, time to decision,
supersedes, information requests, unknown outcomes, revocations, and the rubber-stamp warning."""

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from approvals.models import PolicyVersion
from approvals.services.decisions import consume_decision, revoke_decision
from approvals.services.reconcile import expire_due, mark_unknown
from approvals.services.votes import request_info
from audit.chain.sequencer import sequence_pending
from audit.metrics.charts import stacked_columns
from audit.metrics.queue import Group, collect, percentile
from tests.audit.util import lifecycle, verified_client
from tests.factories import fresh_step_up, make_policy, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def queue(tenant, agent, refund_policy, requester, reviewer_a, reviewer_b, any_code):
    """One proposal per outcome."""
    make_policy(
        tenant, "forbidden", outcome=PolicyVersion.Outcome.DENY, tool_pattern="danger.*", thresholds=[]
    )
    make_policy(tenant, "harmless", outcome=PolicyVersion.Outcome.ALLOW, tool_pattern="safe.*", thresholds=[])
    lifecycle(agent, reviewer_a)  # approved, succeeded
    lifecycle(agent, reviewer_b, verdict="reject")
    submit(agent, action={"tool": "danger.drop", "arguments": {}, "target": "db"})  # denied by policy
    submit(agent, action={"tool": "safe.ping", "arguments": {}, "target": "host"})  # allowed by policy
    expiring = submit(agent, request_id="expiring")
    expire_due(now=expiring.expires_at + timedelta(seconds=1))
    asked = submit(agent, task_id="task-asked", request_id="first")
    request_info(
        asked.id,
        reviewer_a,
        question="Which order?",
        digest_seen=asked.action_digest,
        step_up=fresh_step_up(reviewer_a),
    )
    submit(agent, task_id="task-asked", request_id="second", supersedes="first")  # still open
    revoked = lifecycle(agent, reviewer_a, outcome=None)
    revoke_decision(revoked.id, reviewer_a, reason="wrong customer")
    lost = lifecycle(agent, reviewer_b, outcome=None)
    consume_decision(agent, lost.decision.jti, rev=lost.decision.rev)
    mark_unknown(lost.id, reason="connection reset")
    sequence_pending()  # what the on-commit hook does outside a test's transaction
    return tenant


def test_metrics_count_first_outcomes_by_policy_version_and_tool(queue):
    metrics = collect(f"tenant:{queue.id}")
    assert metrics.submitted == 9
    refunds = metrics.by_policy["refunds@1"]
    assert refunds.outcomes == Counter(approved=3, rejected=1, expired=1, info_requested=1)
    assert refunds.submitted == 7 and refunds.closed == 6
    assert refunds.rate("approved") == pytest.approx(0.5)
    assert refunds.human_decisions == 5 and refunds.approval_rate == pytest.approx(0.6)
    assert metrics.by_policy["forbidden@1"].outcomes == Counter(denied=1)
    assert metrics.by_policy["harmless@1"].outcomes == Counter(allowed=1)
    assert metrics.by_tool["danger.drop"].rate("denied") == 1.0
    assert metrics.by_tool["payments.refund"].submitted == 7


def test_metrics_count_supersedes_info_requests_unknown_outcomes_and_revocations(queue):
    metrics = collect(f"tenant:{queue.id}")
    assert metrics.supersedes == 1
    assert metrics.info_requests == 1
    assert metrics.unknown_outcomes == 1 and metrics.still_unknown == 1
    assert metrics.revocations == 1
    assert metrics.open == 1


def test_time_to_decision_is_measured_from_submission_to_the_first_human_decision(queue):
    metrics = collect(f"tenant:{queue.id}")
    assert len(metrics.overall.durations) == 5  # 3 approvals, 1 rejection, 1 information request
    assert all(0 <= seconds < 60 for seconds in metrics.overall.durations)
    assert metrics.overall.median_seconds <= metrics.overall.p95_seconds


def test_percentiles_use_the_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 0.5) == 50 and percentile(values, 0.95) == 95
    assert percentile([7.0], 0.95) == 7.0 and percentile([], 0.5) is None


def test_a_period_counts_only_proposals_submitted_in_it(queue):
    tomorrow = datetime.now(UTC) + timedelta(days=1)
    assert collect(f"tenant:{queue.id}", since=tomorrow).submitted == 0
    assert collect(f"tenant:{queue.id}", until=tomorrow).submitted == 9


@pytest.mark.parametrize(
    ("approved", "rejected", "flagged"),
    [
        (300, 0, True),  # 100% over the minimum sample
        (299, 1, True),  # 99.7%
        (297, 3, False),  # exactly 99%: not above
        (299, 0, False),  # 100%, but one decision short of a meaningful sample
    ],
)
def test_a_rubber_stamp_is_over_99_percent_approved_over_at_least_300_human_decisions(
    approved, rejected, flagged
):
    group = Group("refunds@1", outcomes=Counter(approved=approved, rejected=rejected, allowed=5000))
    assert group.rubber_stamp is flagged  # policy "allowed" outcomes are no human decisions and do not count


def test_the_metrics_page_warns_of_a_rubber_stamp_and_draws_svg_charts(
    tenant, agent, refund_policy, requester, reviewer_a, reviewer_b, compliance, settings, any_code
):
    settings.AUDIT_RUBBER_STAMP_MIN_SAMPLE = 3
    for voter in (reviewer_a, reviewer_b, reviewer_a):
        lifecycle(agent, voter)
    response = verified_client(compliance).get(f"/audit/{tenant.slug}/metrics/?days=7")
    html = response.content.decode()
    assert response.status_code == 200
    assert "Possible rubber stamp" in html and "refunds@1" in html
    assert html.count('<svg role="img"') == 3 and "<rect" in html
    assert "Proposals per day" in html
    assert "reviewer_a" not in html and "Alice" not in html  # labels name policies and tools, never people


def test_the_metrics_page_without_proposals_says_so(tenant, compliance):
    response = verified_client(compliance).get(f"/audit/{tenant.slug}/metrics/")
    assert response.status_code == 200
    assert b"No proposals in this period." in response.content


def test_the_period_select_shows_the_30_days_the_page_counts(tenant, compliance):
    html = verified_client(compliance).get(f"/audit/{tenant.slug}/metrics/").content.decode()
    assert '<option value="30" selected>30 days</option>' in html


def test_a_day_chart_labels_its_latest_day_however_many_days_it_shows():
    days = [(f"12-{day:02d}", {"approved": 1}) for day in range(1, 31)]
    chart = stacked_columns("Outcomes by day", "", days, ["approved"])
    labels = [text.text for text in chart.texts if text.anchor == "middle"]
    assert labels[-1] == "12-30" and len(labels) <= 10


def test_the_rates_tables_name_their_row_headings(tenant, compliance, queue):
    page = verified_client(compliance).get(f"/audit/{tenant.slug}/metrics/").content.decode()
    assert '<th scope="col"></th>' not in page
    assert '<th scope="col">Policy version</th>' in page and '<th scope="col">Tool</th>' in page
