"""The kill switch: a halt of everything, a tenant or an agent refuses intake, votes and consumes, revokes
released-but-unconsumed decisions and queues CancelTask for every affected task; reads still work and
resume lifts it. It is a database row, so other connections and a restarted process see it."""

import os
import subprocess
import sys
import threading
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection

from accounts.stepup import step_up_for
from approvals.models import Halt, OutboxMessage, PolicyVersion, Proposal
from approvals.schemas import ProposalSubmission
from approvals.selectors import proposal_for_user
from approvals.services import halts
from approvals.services.decisions import consume_decision, record_outcome
from approvals.services.halts import active_halt, resume
from approvals.services.intake import submit_proposal
from approvals.services.votes import cast_vote, request_info
from approvals.states import State
from audit.models import AuditEvent, Verb
from lib.errors import ConsumeRefused, HaltedError, ServiceError, VoteRefused
from tests import factories
from tests.concurrency import requires_postgres, run_together
from tests.factories import approve, submit, totp_code, trail_name
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db


def cancels_for(proposal) -> list[OutboxMessage]:
    return list(OutboxMessage.objects.filter(proposal=proposal, kind=OutboxMessage.Kind.CANCEL))


@pytest.fixture
def other_agent(tenant):
    return factories.make_agent(tenant, "invoice-bot", push_token="p2", api_token="a2")


@pytest.fixture
def globex_agent(other_tenant):
    return factories.make_agent(other_tenant, "globex-bot", push_token="p3", api_token="a3")


# ---------------------------------------------------------------------------------------------------
# Intake


@pytest.mark.parametrize("scope", ["global", "tenant", "agent"])
def test_halt_refuses_intake_in_scope(tenant, agent, refund_policy, requester, admin_user, scope):
    halts.halt(
        scope=scope,
        actor=admin_user,
        reason="runaway spend, INC-4411",
        tenant=tenant if scope == "tenant" else None,
        agent=agent if scope == "agent" else None,
    )
    before = Proposal.objects.count()

    with pytest.raises(HaltedError) as refused:
        submit(agent)

    assert refused.value.code == "halted"
    assert refused.value.http_status == 503
    assert "INC-4411" in refused.value.message
    assert Proposal.objects.count() == before


def test_agent_halt_leaves_other_agents_accepting(agent, other_agent, refund_policy, requester, admin_user):
    halts.halt(scope=Halt.Scope.AGENT, actor=admin_user, reason="bad deploy of refund-demo", agent=agent)

    assert submit(other_agent).state == State.AWAITING_REVIEW


def test_tenant_halt_leaves_other_tenants_accepting(tenant, agent, globex_agent, admin_user):
    halts.halt(scope=Halt.Scope.TENANT, actor=admin_user, reason="acme incident", tenant=tenant)

    assert submit(globex_agent).state == State.AWAITING_REVIEW


def test_replaying_a_known_request_during_a_halt_returns_it(agent, refund_policy, requester, admin_user):
    body = factories.approval_request(request_id="r-1")
    first = submit(agent, task_id="t-1", request_id="r-1", action=body["action"])
    halts.halt(scope=Halt.Scope.GLOBAL, actor=admin_user, reason="maintenance")

    again = submit(agent, task_id="t-1", request_id="r-1", action=body["action"])

    assert again.id == first.id


# ---------------------------------------------------------------------------------------------------
# Votes and consumes


def test_halt_refuses_votes(tenant, agent, refund_policy, requester, reviewer_a, admin_user):
    proposal = submit(agent)
    halts.halt(scope=Halt.Scope.TENANT, actor=admin_user, reason="incident", tenant=tenant)

    with pytest.raises(VoteRefused) as refused:
        cast_vote(
            proposal.id,
            reviewer_a,
            verdict="approve",
            digest_seen=proposal.action_digest,
            step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
        )

    assert refused.value.code == "halted"
    proposal.refresh_from_db()
    assert proposal.state == State.CANCELLED  # the halt cancelled what waited
    assert not proposal.votes.exists()
    assert AuditEvent.objects.filter(verb=Verb.VOTE_REFUSED, data__code="halted").count() == 1


def test_halt_revokes_approved_unconsumed_decisions_and_cancels_their_tasks(
    tenant, agent, refund_policy, requester, reviewer_a, admin_user
):
    proposal, decision = approve(agent, reviewer_a)

    halts.halt(scope=Halt.Scope.TENANT, actor=admin_user, reason="fraud wave", tenant=tenant)

    proposal.refresh_from_db()
    decision.refresh_from_db()
    assert proposal.state == State.REVOKED
    assert decision.revoke_reason == "halt: fraud wave"
    assert decision.revoked_by == admin_user
    [cancel] = cancels_for(proposal)
    assert cancel.message_id == f"cancel-{proposal.id}"
    with pytest.raises(ConsumeRefused) as refused:
        consume_decision(agent, decision.jti, rev=decision.rev)
    assert refused.value.code == "revoked"


def test_halt_revokes_policy_allowed_decisions(tenant, agent, requester, admin_user):
    factories.make_policy(
        tenant, "small-refunds", outcome=PolicyVersion.Outcome.ALLOW, tool_pattern="payments.refund"
    )
    proposal = submit(agent)
    assert proposal.state == State.ALLOWED

    halts.halt(scope=Halt.Scope.AGENT, actor=admin_user, reason="stop the bot", agent=agent)

    proposal.refresh_from_db()
    assert proposal.state == State.REVOKED
    assert len(cancels_for(proposal)) == 1


def test_halt_cancels_tasks_already_executing(
    tenant, agent, refund_policy, requester, reviewer_a, admin_user
):
    proposal, decision = approve(agent, reviewer_a)
    consume_decision(agent, decision.jti, rev=decision.rev)

    halt = halts.halt(scope=Halt.Scope.GLOBAL, actor=admin_user, reason="model provider incident")

    proposal.refresh_from_db()
    assert proposal.state == State.EXECUTING  # consumed: nothing left to revoke, the outcome still settles it
    assert len(cancels_for(proposal)) == 1
    assert [p.id for p in halt.stopped] == [proposal.id]


def test_halt_cancels_proposals_still_waiting_for_people_and_their_tasks(
    tenant, agent, refund_policy, requester, reviewer_a, admin_user
):
    """An operator halting a runaway agent expects nothing of it to stay pending. A request
    parked for review (or waiting for the answer to a question) is cancelled and its task gets CancelTask;
    after a resume it cannot be approved, the agent must ask again."""
    waiting = submit(agent)
    asked = submit(agent)
    request_info(
        asked.id,
        reviewer_a,
        question="which order?",
        digest_seen=asked.action_digest,
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
    )

    halt = halts.halt(scope=Halt.Scope.TENANT, actor=admin_user, reason="incident", tenant=tenant)

    for proposal in (waiting, asked):
        proposal.refresh_from_db()
        assert proposal.state == State.CANCELLED
        assert len(cancels_for(proposal)) == 1
        assert cancels_for(proposal)[0].payload == {"reason": "halt: incident"}
    assert {p.id for p in halt.stopped} == {waiting.id, asked.id}
    resume(actor=admin_user, tenant=tenant)
    with pytest.raises(VoteRefused) as refused:
        cast_vote(
            waiting.id,
            reviewer_a,
            verdict="approve",
            digest_seen=waiting.action_digest,
            step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
        )
    assert refused.value.code == "not_open" and "cancelled at" in refused.value.message
    assert "halt: incident" in refused.value.message


def test_a_request_that_arrived_while_a_halt_committed_is_cancelled_at_the_next_vote(
    tenant, agent, refund_policy, requester, reviewer_a, admin_user
):
    """An intake that read "no halt" just before the halt committed leaves a waiting proposal the halt did
    not see: the vote it draws is refused and cancels it, as the halt would have."""
    proposal = submit(agent)
    Halt.objects.create(scope=Halt.Scope.TENANT, tenant=tenant, reason="raced", operator=admin_user)

    with pytest.raises(VoteRefused) as refused:
        cast_vote(
            proposal.id,
            reviewer_a,
            verdict="approve",
            digest_seen=proposal.action_digest,
            step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
        )

    assert refused.value.code == "halted"
    proposal.refresh_from_db()
    assert proposal.state == State.CANCELLED
    assert len(cancels_for(proposal)) == 1


def test_halt_touches_nothing_outside_its_scope(
    agent, other_agent, refund_policy, requester, reviewer_a, admin_user
):
    halted, _ = approve(agent, reviewer_a)
    spared, _ = approve(other_agent, reviewer_a)

    halts.halt(scope=Halt.Scope.AGENT, actor=admin_user, reason="only refund-demo", agent=agent)

    halted.refresh_from_db()
    spared.refresh_from_db()
    assert halted.state == State.REVOKED
    assert spared.state == State.APPROVED
    assert cancels_for(spared) == []


def test_halt_is_audited_with_operator_reason_and_what_it_stopped(
    tenant, agent, refund_policy, requester, reviewer_a, admin_user
):
    proposal, _ = approve(agent, reviewer_a)

    halt = halts.halt(scope=Halt.Scope.TENANT, actor=admin_user, reason="fraud wave", tenant=tenant)

    event = AuditEvent.objects.get(verb=Verb.HALT_STARTED)
    assert event.chain == f"tenant:{tenant.id}"
    assert event.actor == trail_name("admin")
    assert event.subject == f"halt:{halt.id}"
    assert event.data == {
        "scope": "tenant",
        "tenant": "acme",
        "agent": None,
        "reason": "fraud wave",
        "revoked": [str(proposal.id)],
        "cancelled_waiting": [],
        "cancelled_running": [],
    }


def test_a_decision_released_while_a_halt_committed_is_revoked_at_consume(
    tenant, agent, refund_policy, requester, reviewer_a, admin_user
):
    """A vote that read "no halt" just before the halt committed can still release a decision: the
    consume refuses it and revokes it, so resuming later does not bring it back."""
    proposal, decision = approve(agent, reviewer_a)
    Halt.objects.create(scope=Halt.Scope.TENANT, tenant=tenant, reason="raced", operator=admin_user)

    with pytest.raises(ConsumeRefused) as refused:
        consume_decision(agent, decision.jti, rev=decision.rev)

    assert refused.value.code == "halted"
    proposal.refresh_from_db()
    assert proposal.state == State.REVOKED
    assert len(cancels_for(proposal)) == 1


# ---------------------------------------------------------------------------------------------------
# Reads and outcomes keep working


def test_reads_still_work_while_halted(tenant, agent, refund_policy, requester, reviewer_a, admin_user):
    proposal = submit(agent)
    halts.halt(scope=Halt.Scope.GLOBAL, actor=admin_user, reason="incident")

    assert proposal_for_user(proposal.id, reviewer_a).id == proposal.id
    halt = active_halt(tenant.id, agent.id)
    assert halt is not None and halt.reason == "incident"


def test_outcome_reports_are_still_recorded_while_halted(
    agent, refund_policy, requester, reviewer_a, admin_user
):
    proposal, decision = approve(agent, reviewer_a)
    consume_decision(agent, decision.jti, rev=decision.rev)
    halts.halt(scope=Halt.Scope.AGENT, actor=admin_user, reason="incident", agent=agent)

    record_outcome(agent, decision.jti, status="succeeded", transaction_id="re_1")

    proposal.refresh_from_db()
    assert proposal.state == State.SUCCEEDED


# ---------------------------------------------------------------------------------------------------
# Resume


def test_resume_lifts_the_halt_and_intake_and_votes_work_again(
    tenant, agent, refund_policy, requester, reviewer_a, admin_user
):
    halts.halt(scope=Halt.Scope.TENANT, actor=admin_user, reason="incident", tenant=tenant)

    lifted = resume(actor=admin_user, reason="fixed", tenant=tenant)

    assert lifted == 1
    assert active_halt(tenant.id, agent.id) is None
    proposal = submit(agent)
    cast_vote(
        proposal.id,
        reviewer_a,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
    )
    proposal.refresh_from_db()
    assert proposal.state == State.APPROVED
    lifted_event = AuditEvent.objects.get(verb=Verb.HALT_LIFTED)
    assert lifted_event.actor == trail_name("admin")
    assert lifted_event.data == {"reason": "fixed"}


def test_resume_does_not_bring_back_revoked_decisions(
    tenant, agent, refund_policy, requester, reviewer_a, admin_user
):
    proposal, decision = approve(agent, reviewer_a)
    halts.halt(scope=Halt.Scope.TENANT, actor=admin_user, reason="incident", tenant=tenant)
    resume(actor=admin_user, tenant=tenant)

    with pytest.raises(ConsumeRefused) as refused:
        consume_decision(agent, decision.jti, rev=decision.rev)

    assert refused.value.code == "revoked"


def test_resume_lifts_only_its_own_scope(tenant, agent, admin_user):
    halts.halt(scope=Halt.Scope.GLOBAL, actor=admin_user, reason="everything")

    assert resume(actor=admin_user, tenant=tenant) == 0
    halt = active_halt(tenant.id, agent.id)
    assert halt is not None and halt.scope == Halt.Scope.GLOBAL


def test_halt_needs_a_reason(tenant, admin_user):
    with pytest.raises(ServiceError) as refused:
        halts.halt(scope=Halt.Scope.TENANT, actor=admin_user, reason="  ", tenant=tenant)

    assert refused.value.code == "reason_required"
    assert not Halt.objects.exists()


def test_halt_scope_must_name_its_target(tenant, admin_user):
    with pytest.raises(ServiceError) as refused:
        halts.halt(scope=Halt.Scope.TENANT, actor=admin_user, reason="who?")

    assert refused.value.code == "bad_scope"


# ---------------------------------------------------------------------------------------------------
# Every process sees it


@pytest.mark.django_db(transaction=True)
def test_a_halt_is_seen_from_another_connection(tenant, agent, admin_user):
    halts.halt(scope=Halt.Scope.TENANT, actor=admin_user, reason="seen everywhere", tenant=tenant)
    seen = {}

    def other_process_like_connection():
        try:
            seen["halt"] = active_halt(tenant.id, agent.id)
        finally:
            connection.close()

    thread = threading.Thread(target=other_process_like_connection)
    thread.start()
    thread.join(timeout=30)

    assert seen["halt"] is not None
    assert seen["halt"].reason == "seen everywhere"


@pytest.mark.postgres
@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_a_restarted_process_comes_back_halted(tenant, agent, admin_user):
    halts.halt(scope=Halt.Scope.AGENT, actor=admin_user, reason="survives restarts", agent=agent)
    db = connection.settings_dict
    host = f"{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
    url = f"postgres://{db['USER']}:{db['PASSWORD']}@{host}/{db['NAME']}"
    script = (
        "import django; django.setup(); from approvals.models import Agent; "
        "from approvals.services.halts import active_halt; "
        f"a = Agent.objects.get(slug={agent.slug!r}); h = active_halt(a.tenant_id, a.id); "
        "print(h.reason if h else 'not halted')"
    )

    fresh = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(settings.BASE_DIR),
        env={**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "reviewer.settings"},
    )

    assert fresh.returncode == 0, fresh.stderr
    assert fresh.stdout.strip() == "survives restarts"


# ---------------------------------------------------------------------------------------------------
# manage.py halt / resume


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_halt_command_halts_a_tenant_with_operator_and_reason(
    tenant, agent, refund_policy, requester, reviewer_a, admin_user
):
    proposal, _ = approve(agent, reviewer_a)

    output = run("halt", "--tenant", "acme", "--reason", "runaway spend", "--operator", "admin")

    halt = Halt.objects.get()
    assert (halt.scope, halt.tenant, halt.operator, halt.reason) == (
        "tenant",
        tenant,
        admin_user,
        "runaway spend",
    )
    assert "halted tenant acme" in output
    assert "1 unconsumed decision(s) revoked" in output
    assert "manage.py resume --tenant acme" in output
    proposal.refresh_from_db()
    assert proposal.state == State.REVOKED


def test_halt_command_says_no_canceltask_went_to_a_pull_agent(tenant, refund_policy, requester, reviewer_a):
    """A pull agent is never called, so halting it queues no CancelTask, and the command says so."""
    puller = factories.make_agent(tenant, "puller", card_url="")
    approve(puller, reviewer_a)

    output = run("halt", "--agent", "puller", "--reason", "runaway spend")

    assert "1 unconsumed decision(s) revoked" in output
    assert "CancelTask queued for 0; none for 1 of pull agent(s), which Reviewer never calls" in output
    assert not OutboxMessage.objects.filter(kind=OutboxMessage.Kind.CANCEL).exists()


def test_halt_command_without_operator_is_recorded_as_system(agent):
    run("halt", "--agent", agent.slug, "--reason", "bad deploy")

    halt = Halt.objects.get()
    assert (halt.scope, halt.agent, halt.operator) == ("agent", agent, None)
    assert AuditEvent.objects.get(verb=Verb.HALT_STARTED).actor == "system"


def test_halt_command_everything(agent):
    output = run("halt", "--all", "--reason", "provider outage")

    assert Halt.objects.get().scope == Halt.Scope.GLOBAL
    assert "halted everything" in output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--reason", "no scope"], "one of the arguments --all --tenant --agent is required"),
        (["--all", "--tenant", "acme", "--reason", "two scopes"], "not allowed with argument"),
        (["--tenant", "acme"], "--reason"),
        (["--tenant", "nope", "--reason", "x"], "no tenant 'nope'"),
        (["--agent", "nope", "--reason", "x"], "no agent 'nope'"),
        (["--all", "--reason", "x", "--operator", "ghost"], "no user 'ghost'"),
        (["--all", "--reason", "   "], "a halt needs a reason"),
    ],
)
def test_halt_command_refuses_unclear_requests(tenant, args, message):
    with pytest.raises(CommandError, match=message):
        run("halt", *args)
    assert not Halt.objects.exists()


def test_resume_command_lifts_the_halt(tenant, agent, admin_user):
    run("halt", "--tenant", "acme", "--reason", "incident", "--operator", "admin")

    output = run("resume", "--tenant", "acme", "--reason", "fixed", "--operator", "admin")

    assert "resumed tenant acme (1 halt(s) lifted)" in output
    halt = Halt.objects.get()
    assert halt.lifted_at is not None
    assert halt.lifted_by == admin_user
    assert active_halt(tenant.id, agent.id) is None


def test_resume_command_says_what_still_halts_the_scope(tenant, agent):
    run("halt", "--all", "--reason", "everything")
    run("halt", "--tenant", "acme", "--reason", "acme too")

    output = run("resume", "--tenant", "acme")

    assert "still halted: everything" in output


def test_resume_command_fails_when_the_scope_has_no_halt_of_its_own(tenant):
    run("halt", "--all", "--reason", "everything")

    with pytest.raises(CommandError, match="no halt of its own.*still active: everything"):
        run("resume", "--tenant", "acme")


# ---------------------------------------------------------------------------------------------------
# A halt racing an agent's consume (PostgreSQL: real row locks, two connections)


@pytest.mark.postgres
@requires_postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(5))
def test_halt_racing_consume_either_revokes_or_cancels_the_running_task(
    tenant, agent, refund_policy, requester, reviewer_a, admin_user, attempt
):
    proposal, decision = approve(agent, reviewer_a)

    consumed, halted = run_together(
        lambda: consume_decision(agent, decision.jti, rev=decision.rev).state,
        lambda: halts.halt(scope=Halt.Scope.TENANT, actor=admin_user, reason="race", tenant=tenant),
    )

    assert isinstance(halted, Halt), halted
    proposal.refresh_from_db()
    if consumed == State.EXECUTING:
        assert proposal.state == State.EXECUTING
    else:
        assert isinstance(consumed, ConsumeRefused), consumed
        assert consumed.code in {"revoked", "halted"}
        assert proposal.state == State.REVOKED
    assert len(cancels_for(proposal)) == 1


# ---------------------------------------------------------------------------------------------------
# A halt while an intake that consumes for its agent is in flight (PostgreSQL: real row locks)


@pytest.mark.postgres
@requires_postgres
@pytest.mark.django_db(transaction=True)
def test_a_halt_during_an_intake_that_consumes_cancels_what_it_let_in(tenant, agent, admin_user):
    """The intake has checked for a halt (under its tenant's quota row) and not yet committed when the
    halt comes: the halt waits for it, then finds the proposal it consumed and cancels its task."""
    factories.make_policy(tenant, "small-refunds", tool_pattern="payments.refund", outcome="allow")
    submit(agent, task_id="warm-up")  # the tenant's quota row exists from the first intake on
    checked, release, halted = threading.Event(), threading.Event(), threading.Event()
    results: dict = {}

    def pause_after_the_halt_check(execute, sql, params, many, context):
        if checked.is_set() and not release.is_set():
            release.wait(timeout=30)  # the intake's writes wait here, its quota row still locked
        result = execute(sql, params, many, context)
        if 'FOR UPDATE OF "quota"' in sql:
            checked.set()  # intake's lock and one read (the halt's question among them) are done
        return result

    def intake():
        submission = ProposalSubmission.model_validate(
            {"task_id": "task-in-flight", "context_id": "", "request": factories.approval_request()}
        )
        try:
            with connection.execute_wrapper(pause_after_the_halt_check):
                results["proposal"], _ = submit_proposal(agent, submission, via="test", consume=True)
        finally:
            connection.close()

    def halt():
        try:
            results["halt"] = halts.halt(
                scope=Halt.Scope.TENANT, actor=admin_user, reason="race", tenant=tenant
            )
        finally:
            halted.set()
            connection.close()

    intake_thread = threading.Thread(target=intake)
    intake_thread.start()
    wait_until(checked.is_set, "the intake's halt check")
    halt_thread = threading.Thread(target=halt)
    halt_thread.start()
    # The halt either finished at once (it did not wait for the intake) or waits for a row lock.
    wait_until(lambda: halted.is_set() or _waits_for_a_lock("approvals_quotastate"), "the halt to act")
    release.set()
    intake_thread.join(timeout=30)
    halt_thread.join(timeout=30)

    proposal = results["proposal"]
    proposal.refresh_from_db()
    assert isinstance(results["halt"], Halt)
    assert proposal.state == State.EXECUTING
    assert len(cancels_for(proposal)) == 1, "the halt did not see the proposal the intake let in"


def _waits_for_a_lock(table: str) -> bool:
    """Whether another connection waits for a row lock in a statement on `table` (pg_stat_activity)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
            [f"%{table}%"],
        )
        return cursor.fetchone()[0] > 0
