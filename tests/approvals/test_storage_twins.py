"""Each statement of approvals/storage/ does what its plain-ORM twin does: the same rows read, the same
rows written. Run on SQLite and on PostgreSQL (DATABASE_URL); the consume's claim is PostgreSQL's only."""

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

from approvals.models import Agent, Decision, PolicyVersion, Proposal, QuotaState
from approvals.policy.evaluation import active_versions_for
from approvals.services import decisions
from approvals.services.decisions import consume_decision
from approvals.services.intake.read import hold_and_read
from approvals.services.quotas import agent_limits, hold_quotas, tenant_limits
from approvals.states import WAITING_FOR_PEOPLE, State
from approvals.storage import quotas as quota_storage
from approvals.storage.intake import insert_proposal
from audit.models import AuditEvent, Verb
from tests import factories
from tests.factories import submit

pytestmark = pytest.mark.django_db


def row(instance) -> dict:
    return {field.attname: getattr(instance, field.attname) for field in type(instance)._meta.concrete_fields}


def quota_rows(agent) -> list[dict]:
    rows = QuotaState.objects.filter(Q(tenant_id=agent.tenant_id, agent=None) | Q(agent=agent))
    return [row(state) for state in rows.order_by(F("agent").asc(nulls_first=True))]


def test_the_quota_lock_reads_the_rows_and_limits_the_orm_reads(agent, refund_policy, requester):
    submit(agent)  # the first intake creates the quota rows
    Agent.objects.filter(pk=agent.pk).update(intake_burst=7, open_proposals_max=3)
    tenant = agent.tenant
    tenant.intake_per_minute = 11
    tenant.save(update_fields=["intake_per_minute"])

    with transaction.atomic():
        hold = hold_quotas(agent, timezone.now())
        twin = list(
            QuotaState.objects.select_for_update()
            .filter(Q(tenant_id=agent.tenant_id, agent=None) | Q(agent=agent))
            .order_by(F("agent").asc(nulls_first=True))
        )

    assert [row(hold.tenant_state), row(hold.agent_state)] == [row(state) for state in twin]
    assert hold.agent_limit == agent_limits(Agent.objects.get(pk=agent.pk))
    assert hold.agent_limit.burst == 7
    assert hold.tenant_limit == tenant_limits(type(tenant).objects.get(pk=tenant.pk))
    assert hold.tenant_limit.per_minute == 11


def test_the_quota_spend_writes_what_the_orm_update_writes(agent, refund_policy, requester):
    submit(agent)
    hold = hold_quotas(agent, timezone.now())
    agent_row, tenant_row = hold.agent_state.pk, hold.tenant_state.pk
    now = timezone.now() + timedelta(seconds=5)

    with transaction.atomic():
        quota_storage.spend(agent_row, tenant_row, tokens=(2.5, 8.25), bounds=(4, None), now=now)
        by_statement = quota_rows(agent)
        transaction.set_rollback(True)
    with transaction.atomic():
        QuotaState.objects.filter(pk__in=(agent_row, tenant_row)).update(
            tokens=Case(When(pk=agent_row, then=Value(2.5)), default=Value(8.25)),
            open_at_most=Case(When(pk=agent_row, then=Value(4)), default=Value(None)),
            refilled_at=now,
        )
        by_orm = quota_rows(agent)
        transaction.set_rollback(True)

    assert by_statement == by_orm
    assert [state["tokens"] for state in by_statement] == [8.25, 2.5]  # the tenant's row first


def test_the_quota_spend_takes_two_unknown_bounds(agent, refund_policy, requester):
    """Both bounds unknown (None): PostgreSQL must still read the CASE as an integer."""
    submit(agent)
    hold = hold_quotas(agent, timezone.now())
    with transaction.atomic():
        quota_storage.spend(
            hold.agent_state.pk,
            hold.tenant_state.pk,
            tokens=(1.0, 2.0),
            bounds=(None, None),
            now=timezone.now(),
        )
        assert [state["open_at_most"] for state in quota_rows(agent)] == [None, None]
        transaction.set_rollback(True)


def test_the_one_read_finds_what_the_orm_finds(tenant, agent, refund_policy, requester):
    factories.make_policy(tenant, "tickets", tool_pattern="tickets.*", outcome=PolicyVersion.Outcome.ALLOW)
    earlier = submit(agent, task_id="task-1")
    submit(agent)
    other_agent = factories.make_agent(tenant, slug="other", push_token="p2", api_token="a2")
    submit(other_agent)
    QuotaState.objects.update(open_at_most=None)  # no bound: the read counts
    proposal = Proposal(
        tenant=tenant,
        agent=agent,
        task_id="task-1",
        request_id=earlier.request_id,
        action=earlier.action,
        tool=earlier.tool,
        target_key=earlier.target_key,
    )

    with transaction.atomic():
        _, found = hold_and_read(agent, proposal, timezone.now())

    versions = active_versions_for(tenant)
    assert [row(version) for version in found.versions] == [row(version) for version in versions]
    assert [row(version.policy) for version in found.versions] == [
        row(version.policy) for version in versions
    ]
    replay = Proposal.objects.filter(agent=agent, task_id="task-1", request_id=earlier.request_id)
    assert found.existing_id == replay.values_list("id", flat=True).first()
    waiting = Proposal.objects.filter(state__in=WAITING_FOR_PEOPLE)
    assert (found.open_counts.agent, found.open_counts.tenant) == (
        waiting.filter(agent=agent).count(),
        waiting.filter(tenant=tenant).count(),
    )
    assert (found.open_counts.agent, found.open_counts.tenant) == (2, 3)


def copy_of(proposal: Proposal, request_id: str) -> Proposal:
    fields = {
        field.attname: getattr(proposal, field.attname)
        for field in Proposal._meta.concrete_fields
        if field.attname not in {"id", "created_at"}
    }
    return Proposal(**{**fields, "request_id": request_id})


def test_the_proposal_insert_writes_what_the_orm_writes(tenant, agent, refund_policy, requester):
    factories.make_policy(tenant, "second", tool_pattern="payments.*")
    template = submit(agent)
    versions = list(active_versions_for(tenant))
    assert len(versions) == 2

    candidate = copy_of(template, "by-statement")
    candidate.agent = agent
    inserted = insert_proposal(candidate, versions)
    twin = copy_of(template, "by-orm")
    twin.save(force_insert=True)
    twin.policy_versions.add(*versions)

    def stored(request_id: str) -> tuple[dict, list]:
        found = Proposal.objects.get(agent=agent, request_id=request_id)
        fields = {name: value for name, value in row(found).items() if name not in {"id", "request_id"}}
        fields["created_at"] = fields["created_at"] is not None
        return fields, sorted(found.policy_versions.values_list("pk", flat=True))

    assert stored("by-statement") == stored("by-orm")
    # The instance returned is the stored row's, with the related objects the caller held: a later
    # save updates it.
    assert inserted.agent is agent
    inserted.summary = "changed"
    inserted.save(update_fields=["summary"])
    assert Proposal.objects.get(pk=inserted.pk).summary == "changed"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the one-statement claim is PostgreSQL's")
def test_the_consume_claim_writes_what_the_step_by_step_consume_writes(tenant, agent, requester, monkeypatch):
    factories.make_policy(tenant, "tickets", tool_pattern="tickets.*", outcome=PolicyVersion.Outcome.ALLOW)
    action = {"tool": "tickets.close", "arguments": {"id": "7"}}
    by_claim, by_orm = submit(agent, action=action), submit(agent, action=action)
    clock = timezone.now()

    def consume(proposal: Proposal) -> tuple[dict, dict, list]:
        decision = Decision.objects.get(proposal=proposal)
        consume_decision(agent, decision.jti, rev=decision.rev, now=clock)
        stored = Proposal.objects.get(pk=proposal.pk)
        events = AuditEvent.objects.filter(subject=f"proposal:{proposal.pk}").order_by("id")
        written = [
            (event.actor, event.verb, {**event.data, "jti": "jti"} if "jti" in event.data else event.data)
            for event in events
            if event.verb in {Verb.PROPOSAL_TRANSITIONED, Verb.DECISION_CONSUMED}
        ][-2:]
        state = {
            "state": stored.state,
            "rev": stored.rev - proposal.rev,
            "executing_since": stored.executing_since is not None,
        }
        spent = Decision.objects.get(pk=decision.pk)
        return state, {"consumed_at": spent.consumed_at, "revoked_at": spent.revoked_at}, written

    claimed = consume(by_claim)
    monkeypatch.setattr(decisions, "_claim", lambda *args: None)  # the step-by-step path SQLite takes
    stepwise = consume(by_orm)

    assert claimed == stepwise
    assert claimed[0]["state"] == State.EXECUTING
    assert claimed[1]["consumed_at"] == clock


def test_a_held_insert_writes_what_the_orms_insert_writes(agent, refund_policy, requester):
    """insert_held (a review notice, a decision: rows nobody reads back in the transaction) against
    save(force_insert=True)."""
    from approvals.models import ReviewNotice
    from approvals.storage.rows import insert_held
    from lib.storage.held_writes import held_writes

    proposal = submit(agent)
    ReviewNotice.objects.filter(proposal=proposal).delete()
    with transaction.atomic(), held_writes():
        insert_held(ReviewNotice(proposal=proposal))
    by_statement = list(
        ReviewNotice.objects.filter(proposal=proposal).values("proposal_id", "user_id", "sent_at")
    )
    ReviewNotice.objects.filter(proposal=proposal).delete()
    ReviewNotice(proposal=proposal).save(force_insert=True)
    by_orm = list(ReviewNotice.objects.filter(proposal=proposal).values("proposal_id", "user_id", "sent_at"))
    assert by_statement == by_orm == [{"proposal_id": proposal.pk, "user_id": None, "sent_at": None}]


def test_a_held_update_writes_what_the_orms_save_writes(
    agent, refund_policy, requester, reviewer_a, reviewer_b
):
    """update_held (a standing grant's spend, under the row's lock) against save(update_fields=...):
    the counter and the JSON of what was spent, and nothing else of the row."""
    from approvals.models import Grant
    from approvals.storage.rows import update_held
    from lib.storage.held_writes import held_writes
    from tests.approvals.grant_helpers import active_grant, grant_policy

    grant_policy(agent.tenant)
    grant = active_grant(agent, reviewer_a, reviewer_b)
    before = row(Grant.objects.get(pk=grant.pk))
    with transaction.atomic(), held_writes():
        locked = Grant.objects.select_for_update().get(pk=grant.pk)
        locked.uses, locked.spent = 3, {"EUR": "75.00"}
        update_held(locked, ("uses", "spent"))
    by_statement = row(Grant.objects.get(pk=grant.pk))
    Grant.objects.filter(pk=grant.pk).update(uses=0, spent={})
    by_orm_instance = Grant.objects.get(pk=grant.pk)
    by_orm_instance.uses, by_orm_instance.spent = 3, {"EUR": "75.00"}
    by_orm_instance.save(update_fields=["uses", "spent"])
    by_orm = row(Grant.objects.get(pk=grant.pk))
    assert by_statement == by_orm == {**before, "uses": 3, "spent": {"EUR": "75.00"}}
