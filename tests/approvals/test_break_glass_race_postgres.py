"""Concurrency of the break-glass budget: twenty releases by one person at once, on twenty
proposals, release exactly as many as the weekly budget allows; the rest are refused as over budget.
The budget is counted under a lock on the person's membership row (SELECT ... FOR UPDATE on PostgreSQL).

Staged with real threads, each on its own database connection, lined up on a barrier
(tests/concurrency.run_together). A one-time code
is usable once, so each thread hands the service a step-up already checked (what the view would pass).
"""

import pytest
from django.utils import timezone

from accounts.stepup import StepUp
from approvals.models import BreakGlassRelease, Decision, PostHocReview
from approvals.services.break_glass import break_glass_release
from approvals.states import State
from audit.models import AuditEvent, Verb
from lib.errors import BreakGlassRefused
from tests import factories
from tests.concurrency import requires_postgres, run_together
from tests.factories import submit

pytestmark = [pytest.mark.postgres, requires_postgres]

THREADS = 20
BUDGET = 3


@pytest.mark.django_db(transaction=True)
def test_twenty_simultaneous_releases_by_one_person_never_exceed_the_budget():
    tenant = factories.make_tenant()
    agent = factories.make_agent(tenant)
    riley = factories.make_user("riley", tenant=tenant, groups=["finance"], totp=False)
    factories.make_user("sam", tenant=tenant, groups=["finance"], totp=False)
    factories.make_user("dana", tenant=tenant, role="admin", groups=["admins"], totp=False)
    factories.make_policy(
        tenant,
        "refunds",
        thresholds=[{"group": "finance", "count": 2}],
        break_glass={"people": ["riley"], "per_week": BUDGET, "amount_cap": "500.00", "currency": "EUR"},
    )
    proposals = [submit(agent) for _ in range(THREADS)]

    def release(index: int):
        return lambda: break_glass_release(
            proposals[index].id,
            riley,
            reason=f"emergency {index}",
            digest_seen=proposals[index].action_digest,
            step_up=StepUp("totp", timezone.now()),
        )

    results = run_together(*(release(index) for index in range(THREADS)))
    # A refusal by its code; anything else raised (a deadlock, a conflict) fails the test below.
    outcomes = [
        "released"
        if isinstance(result, BreakGlassRelease)
        else result.code
        if isinstance(result, BreakGlassRefused)
        else repr(result)
        for result in results
    ]

    assert sorted(outcomes) == ["budget_exhausted"] * (THREADS - BUDGET) + ["released"] * BUDGET, outcomes
    assert BreakGlassRelease.objects.filter(releaser=riley).count() == BUDGET
    assert PostHocReview.objects.count() == 2 * BUDGET
    released = [p for p, outcome in zip(proposals, outcomes, strict=True) if outcome == "released"]
    for proposal in proposals:
        proposal.refresh_from_db()
    assert sorted(p.state for p in proposals) == sorted(
        [State.APPROVED] * BUDGET + [State.AWAITING_REVIEW] * (THREADS - BUDGET)
    )
    assert Decision.objects.filter(proposal__in=released).count() == BUDGET
    # Each refusal is on record with the count it saw: the budget was full every time.
    refused = AuditEvent.objects.filter(verb=Verb.BREAK_GLASS_REFUSED)
    assert refused.count() == THREADS - BUDGET
    assert {(e.data["code"], e.data["used"]) for e in refused} == {("budget_exhausted", BUDGET)}
    used = sorted(e.data["budget"]["used"] for e in AuditEvent.objects.filter(verb=Verb.BREAK_GLASS_RELEASED))
    assert used == list(range(1, BUDGET + 1))
