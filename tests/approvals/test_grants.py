"""Standing grants (approvals/services/grants.py): asked for as a proposal people approve, then
deciding the later calls that fit them, within their uses, amount and time, until revoked or lapsed."""

import threading
from datetime import timedelta
from decimal import Decimal

import jwt
import pytest
import time_machine
from django.urls import reverse
from django.utils import timezone

from approvals.models import Decision, Grant, GrantMiss, GrantUse, Proposal
from approvals.services.decisions import consume_decision
from approvals.services.grants import ask_for_renewals, lapse_expired_grants, revoke_grant
from approvals.states import State
from approvals.worker.jobs import JOBS, JobContext
from approvals.worker.report import TickReport
from audit.chain.sequencer import sequence_pending
from audit.models import AuditEvent, Verb
from lib.errors import Conflict, ConsumeRefused, IntakeError, RevokeRefused
from tests import factories
from tests.approvals.grant_helpers import active_grant, grant_policy, refund, request_grant

pytestmark = pytest.mark.django_db


@pytest.fixture
def grants(tenant, refund_policy, requester, reviewer_a, reviewer_b):
    grant_policy(tenant)
    return tenant


def claims(proposal) -> dict:
    return jwt.decode(Decision.objects.get(proposal=proposal).token, options={"verify_signature": False})


def test_a_grant_request_waits_for_people_and_is_in_force_after_two_approvals(
    grants, agent, reviewer_a, reviewer_b
):
    proposal = request_grant(agent)
    grant = Grant.objects.get(proposal=proposal)
    assert proposal.state == State.AWAITING_REVIEW
    assert grant.state == Grant.State.PROPOSED
    assert (grant.tool_pattern, grant.max_uses, grant.max_amount) == (
        "payments.refund",
        30,
        {"EUR": "600.00"},
    )
    assert grant.principal_id == "requester"  # the request's own principal, by default

    factories.vote(proposal, reviewer_a)
    assert Grant.objects.get(pk=grant.pk).state == Grant.State.PROPOSED
    factories.vote(proposal, reviewer_b)

    grant.refresh_from_db()
    assert grant.state == Grant.State.ACTIVE
    assert len(grant.approved_by) == 2
    verbs = set(AuditEvent.objects.filter(subject=f"grant:{grant.id}").values_list("verb", flat=True))
    assert verbs == {Verb.GRANT_REQUESTED, Verb.GRANT_ACTIVATED}


def test_a_call_that_fits_is_allowed_naming_the_grant_and_what_is_left(grants, agent, reviewer_a, reviewer_b):
    grant = active_grant(agent, reviewer_a, reviewer_b)

    call = refund(agent, amount="25.00")

    assert call.state == State.ALLOWED
    claim = claims(call)
    assert claim["grant"] == {"id": str(grant.id), "uses_left": 29, "amount_left": {"EUR": "575.00"}}
    assert claim["consume"] is True
    assert claim["approvers"][0]["sub"] == f"grant:{grant.id}"
    assert claim["approvers"][0]["auth"] == {"method": "grant"}
    assert claim["approvers"][0]["approved_by"] == grant.approved_by
    grant.refresh_from_db()
    assert (grant.uses, grant.spent) == (1, {"EUR": "25.00"})
    use = GrantUse.objects.get(proposal=call)
    assert (use.grant_id, use.amount, use.uses_left) == (grant.id, Decimal("25.00"), 29)
    assert AuditEvent.objects.filter(verb=Verb.GRANT_USED, subject=f"proposal:{call.id}").exists()


def test_a_rejected_grant_request_is_declined_and_decides_nothing(grants, agent, reviewer_a):
    proposal = request_grant(agent)
    factories.vote(proposal, reviewer_a, verdict="reject", reason="too broad")

    assert Grant.objects.get(proposal=proposal).state == Grant.State.DECLINED
    assert refund(agent).state == State.AWAITING_REVIEW


def test_a_call_over_the_condition_goes_to_people_and_says_which_grant_it_missed(
    grants, agent, reviewer_a, reviewer_b
):
    grant = active_grant(agent, reviewer_a, reviewer_b)

    call = refund(agent, amount="80.00")

    assert call.state == State.AWAITING_REVIEW
    miss = GrantMiss.objects.get(proposal=call)
    assert (miss.grant_id, miss.reason) == (grant.id, "its condition does not hold for these arguments")
    grant.refresh_from_db()
    assert grant.uses == 0


def test_the_total_amount_and_the_uses_bound_the_grant(grants, agent, reviewer_a, reviewer_b):
    grant = active_grant(agent, reviewer_a, reviewer_b, max_uses="3", max_amount={"EUR": "100.00"})

    states = [refund(agent, amount="40.00").state for _ in range(3)]

    assert states == [State.ALLOWED, State.ALLOWED, State.AWAITING_REVIEW]
    assert GrantMiss.objects.get().reason == "EUR 40.00 is more than the EUR 20.00 left"
    assert refund(agent, amount="20.00").state == State.ALLOWED  # the third use, exactly what was left
    last = refund(agent, amount="1.00")
    assert last.state == State.AWAITING_REVIEW
    assert GrantMiss.objects.get(proposal=last).reason == "all 3 uses are spent"
    grant.refresh_from_db()
    assert (grant.uses, grant.spent) == (3, {"EUR": "100.00"})


def test_another_currency_or_principal_does_not_fit(grants, agent, reviewer_a, reviewer_b):
    active_grant(agent, reviewer_a, reviewer_b)

    in_dollars = refund(agent, amount="10.00", currency="USD")
    for_someone_else = refund(agent, amount="10.00", principal_id="mallory")

    assert in_dollars.state == State.AWAITING_REVIEW
    assert GrantMiss.objects.get(proposal=in_dollars).reason == "it caps EUR; the call is in USD"
    assert for_someone_else.state == State.AWAITING_REVIEW
    assert not GrantMiss.objects.filter(proposal=for_someone_else).exists()  # not named by it at all


def test_a_grant_does_not_apply_before_its_start(grants, agent, reviewer_a, reviewer_b):
    start = (timezone.now() + timedelta(days=1)).isoformat().replace("+00:00", "Z")
    active_grant(agent, reviewer_a, reviewer_b, not_before=start)

    call = refund(agent)

    assert call.state == State.AWAITING_REVIEW
    assert GrantMiss.objects.get(proposal=call).reason.startswith("it applies from ")


def test_a_policy_deny_wins_over_a_grant(grants, tenant, agent, reviewer_a, reviewer_b):
    grant = active_grant(agent, reviewer_a, reviewer_b)
    factories.make_policy(
        tenant,
        "no-cents",
        outcome="deny",
        tool_pattern="payments.refund",
        condition="double(args.amount) < 5.0",
        thresholds=[],
    )

    assert refund(agent, amount="2.00").state == State.DENIED
    grant.refresh_from_db()
    assert grant.uses == 0  # policy decided it: the grant is not spent


def test_the_environment_must_be_stated_as_granted(grants, agent, reviewer_a, reviewer_b):
    active_grant(agent, reviewer_a, reviewer_b, environment="production")

    call = refund(agent)

    assert call.state == State.AWAITING_REVIEW
    assert (
        GrantMiss.objects.get(proposal=call).reason
        == "it covers environment 'production'; the call states 'none'"
    )


def test_a_call_after_the_expiry_goes_to_people_before_the_worker_lapses_the_grant(
    grants, agent, reviewer_a, reviewer_b
):
    grant = active_grant(agent, reviewer_a, reviewer_b)

    with time_machine.travel(grant.expires_at + timedelta(minutes=1), tick=False):
        call = refund(agent)

    assert call.state == State.AWAITING_REVIEW
    assert GrantMiss.objects.get(proposal=call).reason.startswith("it expired at ")
    grant.refresh_from_db()
    assert (grant.state, grant.uses, grant.spent) == (Grant.State.ACTIVE, 0, {})  # nothing spent


def test_the_data_class_must_be_stated_as_granted(grants, agent, reviewer_a, reviewer_b):
    active_grant(agent, reviewer_a, reviewer_b, data_class="payments")

    elsewhere = refund(agent, consequences={"data_class": "health"})
    stated = refund(agent, consequences={"data_class": "payments"})

    assert elsewhere.state == State.AWAITING_REVIEW
    assert (
        GrantMiss.objects.get(proposal=elsewhere).reason
        == "it covers data_class 'payments'; the call states 'health'"
    )
    assert stated.state == State.ALLOWED
    assert claims(stated)["grant"]["uses_left"] == 29


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"condition": "double(args.amount) <="}, "condition", "does not compile"),
        ({"tool_pattern": "*"}, "tool_pattern", "bare wildcard"),
        ({"tool_pattern": "reviewer.*"}, "tool_pattern", "asking for grants"),
        ({"max_uses": "0"}, "max_uses", "whole number"),
        ({"expires_at": "2020-01-01T00:00:00Z"}, "expires_at", "in the past"),
        ({"max_amount": {"eur": "600"}}, "max_amount", "three-letter"),
        ({"scope": "all"}, "scope", "unknown grant terms"),
    ],
)
def test_a_grant_that_cannot_be_granted_is_refused_and_nothing_changes(
    grants, agent, overrides, field, words
):
    before = (Proposal.objects.count(), Grant.objects.count())

    with pytest.raises(IntakeError) as refused:
        request_grant(agent, **overrides)

    assert refused.value.code == "bad_grant"
    assert refused.value.field == f"request.action.arguments.{field}"
    assert words in refused.value.message
    assert (Proposal.objects.count(), Grant.objects.count()) == before


def test_a_policy_can_forbid_grants_for_a_tool(grants, tenant, agent):
    factories.make_policy(tenant, "no-grants", tool_pattern="payments.*", forbid_grants=True)
    before = Proposal.objects.count()

    with pytest.raises(IntakeError) as refused:
        request_grant(agent)

    assert refused.value.code == "grant_forbidden"
    assert "no-grants@1" in refused.value.message
    assert Proposal.objects.count() == before


def test_a_policy_that_forbids_grants_sends_the_call_to_people_despite_a_grant(
    grants, tenant, agent, reviewer_a, reviewer_b
):
    grant = active_grant(agent, reviewer_a, reviewer_b)
    factories.make_policy(
        tenant,
        "r3-by-people",
        tool_pattern="payments.refund",
        condition="double(args.amount) > 20.0",
        thresholds=[{"group": "finance", "count": 1}],
        forbid_grants=True,
    )

    call = refund(agent, amount="25.00")

    assert call.state == State.AWAITING_REVIEW
    assert "forbids grants" in GrantMiss.objects.get(proposal=call, grant=grant).reason


def test_a_policy_alone_never_gives_a_grant(tenant, agent, requester):
    factories.make_policy(
        tenant, "grants-free", outcome="allow", tool_pattern="reviewer.grant", thresholds=[]
    )

    proposal = request_grant(agent)

    assert proposal.state == State.AWAITING_REVIEW
    assert Grant.objects.get(proposal=proposal).state == Grant.State.PROPOSED


def test_revocation_stops_the_grant_and_refuses_the_consume_of_its_unconsumed_decisions(
    grants, agent, reviewer_a, reviewer_b
):
    grant = active_grant(agent, reviewer_a, reviewer_b)
    consumed, unconsumed = refund(agent), refund(agent)
    consume_decision(agent, consumed.decision.jti, rev=consumed.decision.rev)

    revoke_grant(grant.id, reviewer_a, reason="the outage is over")

    grant.refresh_from_db()
    assert (grant.state, grant.end_reason, grant.ended_by) == (
        Grant.State.REVOKED,
        "the outage is over",
        reviewer_a,
    )
    with pytest.raises(ConsumeRefused) as refused:
        consume_decision(agent, unconsumed.decision.jti, rev=unconsumed.decision.rev)
    assert refused.value.code == "revoked"
    assert Proposal.objects.get(pk=consumed.pk).state == State.EXECUTING
    after = refund(agent)
    assert after.state == State.AWAITING_REVIEW
    assert GrantMiss.objects.get(proposal=after).reason == "it was revoked: the outage is over"
    event = AuditEvent.objects.get(verb=Verb.GRANT_REVOKED)
    assert event.data["decisions_revoked"] == [str(unconsumed.id)]


def test_revocation_needs_a_reason_an_approver_or_admin_and_a_grant_in_force(
    grants, agent, reviewer_a, reviewer_b, requester, admin_user, outsider
):
    grant = active_grant(agent, reviewer_a, reviewer_b)

    with pytest.raises(RevokeRefused):
        revoke_grant(grant.id, reviewer_a, reason=" ")
    with pytest.raises(RevokeRefused) as not_eligible:
        revoke_grant(grant.id, requester, reason="no")
    assert not_eligible.value.code == "not_eligible"
    from lib.errors import NotFound

    with pytest.raises(NotFound):
        revoke_grant(grant.id, outsider, reason="no")
    revoke_grant(grant.id, admin_user, reason="admin says so")
    with pytest.raises(Conflict) as again:
        revoke_grant(grant.id, reviewer_b, reason="again")
    assert again.value.code == "not_revocable"
    assert AuditEvent.objects.filter(verb=Verb.GRANT_REVOKED).count() == 1


def test_approvers_are_asked_to_renew_before_expiry_once_and_an_expired_grant_lapses(
    grants, agent, reviewer_a, reviewer_b, mailoutbox, settings
):
    settings.GRANT_RENEWAL_NOTICE_SECONDS = 3600
    grant = active_grant(agent, reviewer_a, reviewer_b)
    early = grant.expires_at - timedelta(hours=2)
    near = grant.expires_at - timedelta(minutes=30)
    job = next(job for job in JOBS if job.name == "ask_grant_renewals")

    job.run(JobContext(stop=threading.Event()), TickReport(), early)
    assert mailoutbox == []
    job.run(JobContext(stop=threading.Event()), TickReport(), near)
    job.run(JobContext(stop=threading.Event()), TickReport(), near)  # asked once

    assert sorted(m.to[0] for m in mailoutbox) == ["reviewer_a@example.test", "reviewer_b@example.test"]
    assert "renew it or let it lapse" in mailoutbox[0].subject
    assert "/grants/" in mailoutbox[0].body
    assert ask_for_renewals(near) == []
    assert lapse_expired_grants(near) == 0
    assert lapse_expired_grants(grant.expires_at + timedelta(seconds=1)) == 1

    grant.refresh_from_db()
    assert grant.state == Grant.State.LAPSED  # never renewed silently
    verbs = list(
        AuditEvent.objects.filter(subject=f"grant:{grant.id}").order_by("id").values_list("verb", flat=True)
    )
    assert verbs[-2:] == [Verb.GRANT_RENEWAL_ASKED, Verb.GRANT_LAPSED]


def test_the_trail_of_a_grant_verifies(grants, agent, reviewer_a, reviewer_b):
    from audit.chain.verification import verify_chain

    grant = active_grant(agent, reviewer_a, reviewer_b)
    refund(agent)
    revoke_grant(grant.id, reviewer_b, reason="done")
    sequence_pending()

    assert verify_chain(f"tenant:{agent.tenant_id}").ok


def test_metrics_count_calls_under_grants_beside_people_and_policy(
    grants, tenant, agent, reviewer_a, reviewer_b, compliance, settings, client
):
    from prometheus_client.parser import text_string_to_metric_families

    from audit.metrics.queue import collect

    active_grant(agent, reviewer_a, reviewer_b)  # a grant request, decided by people
    refund(agent, amount="25.00")  # under the grant
    refund(agent, amount="30.00")  # under the grant
    factories.make_policy(
        tenant,
        "no-cents",
        outcome="deny",
        tool_pattern="payments.refund",
        condition="double(args.amount) < 1.0",
        thresholds=[],
    )
    refund(agent, amount="0.50")  # denied by policy
    sequence_pending()

    metrics = collect(f"tenant:{tenant.id}")

    assert dict(metrics.decided_by) == {"people": 1, "grant": 2, "policy": 1}
    settings.METRICS_TOKEN = "scrape-secret"
    text = client.get(reverse("audit:prometheus"), HTTP_AUTHORIZATION="Bearer scrape-secret").content.decode()
    samples = {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "reviewer_decisions_by_decider_total"
    }
    assert samples[(("decided_by", "grant"), ("tenant", "acme"))] == 2
    assert samples[(("decided_by", "people"), ("tenant", "acme"))] == 1
    # The metrics page says it too, so a grant that replaces all review shows there.
    page = factories.verified_client(compliance).get(reverse("audit:metrics", args=[tenant.slug]) + "?days=7")
    assert page.status_code == 200
    assert "people 1, policy 1, standing grants 2" in page.content.decode()


def test_intakes_grants_flag_equals_its_orm_twin(grants, tenant, agent, reviewer_a, reviewer_b):
    from django.db.models import F

    from approvals.services.grants import RECENTLY_ENDED
    from approvals.storage.grants import NAMED_STATES, grants_named_expression

    def both(now):
        flag = (
            type(agent)
            .objects.filter(pk=agent.pk)
            .annotate(named=grants_named_expression(agent.id, now - RECENTLY_ENDED))
            .values_list("named", flat=True)
            .get()
        )
        twin = Grant.objects.filter(
            agent=agent, state__in=NAMED_STATES, expires_at__gt=now - RECENTLY_ENDED
        ).exists()
        return flag is not None, twin

    now = timezone.now()
    assert both(now) == (False, False)
    grant = active_grant(agent, reviewer_a, reviewer_b)
    assert both(now) == (True, True)
    Grant.objects.filter(pk=grant.pk).update(expires_at=F("expires_at") - timedelta(days=30))
    assert both(now) == (False, False)  # ended long ago: no longer named


def test_an_approver_asks_to_renew_and_another_approves_the_next_window(
    grants, agent, reviewer_a, reviewer_b, tenant
):
    from approvals.services.grant_renewals import renew_grant
    from lib.errors import VoteRefused

    third = factories.make_user("reviewer_d", tenant=tenant, groups=["finance"])
    grant = active_grant(agent, reviewer_a, reviewer_b)

    renewal = renew_grant(grant.id, reviewer_a)

    assert renewal.state == Grant.State.PROPOSED and renewal.renews_id == grant.id
    assert renewal.not_before == grant.expires_at
    assert (renewal.tool_pattern, renewal.condition, renewal.max_uses) == (
        grant.tool_pattern,
        grant.condition,
        grant.max_uses,
    )
    assert renewal.proposal.state == State.AWAITING_REVIEW
    with pytest.raises(VoteRefused):  # who asked for it does not approve it
        factories.vote(renewal.proposal, reviewer_a)
    with pytest.raises(Conflict):  # one renewal at a time
        renew_grant(grant.id, reviewer_b)
    factories.vote(renewal.proposal, reviewer_b)
    factories.vote(renewal.proposal, third)
    renewal.refresh_from_db()
    assert renewal.state == Grant.State.ACTIVE
    assert Grant.objects.get(pk=grant.pk).state == Grant.State.ACTIVE  # the old one runs to its end
