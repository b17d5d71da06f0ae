"""Two PEPs re-evaluating one approval at the same moment, each on its own database connection
(PostgreSQL: real row locks): exactly one gets `true`."""

import pytest

from approvals.models import PolicyVersion, Proposal
from approvals.states import State
from audit.models import AuditEvent, Verb
from authzen.evaluation import evaluate_access, submission_for, take_in
from authzen.mapping import read_question
from tests import factories
from tests.authzen.test_evaluation import refund
from tests.concurrency import requires_postgres, run_together

pytestmark = [pytest.mark.postgres, requires_postgres, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("attempt", range(3))
def test_two_reevaluations_at_once_release_the_approval_once(tenant, requester, reviewer_a, attempt):
    factories.make_policy(
        tenant, "refunds", outcome=PolicyVersion.Outcome.REQUIRE_APPROVAL, tool_pattern="payments.refund"
    )
    pep = factories.make_agent(tenant, "gateway", card_url="")
    question = read_question(refund())
    evaluation_id = evaluate_access(pep, question)["context"]["evaluation_id"]
    proposal, _ = take_in(pep, submission_for(question, evaluation_id))
    factories.vote(proposal, reviewer_a)
    jti = str(Proposal.objects.get(pk=proposal.pk).decision.jti)
    again = read_question(refund(authzen_access_request_approval={"approval_id": jti}))

    results = run_together(lambda: evaluate_access(pep, again), lambda: evaluate_access(pep, again))

    assert sorted(r["decision"] for r in results) == [False, True], results
    (refused,) = [r for r in results if not r["decision"]]
    assert refused["context"]["reason"] == "approval_consumed"
    assert Proposal.objects.get(pk=proposal.pk).state == State.EXECUTING
    assert AuditEvent.objects.filter(verb=Verb.DECISION_CONSUMED).count() == 1
