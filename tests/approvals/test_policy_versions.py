"""Versioned policy (DESIGN.md "Policy"): a version is immutable, a change is a new draft, a draft is
active only after a second admin (never its author) approves it, activation retires the version it
replaces in the same transaction, and a dry run replays recent proposals against a draft."""

import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction

from accounts.stepup import step_up_for
from approvals.models import Policy, PolicyVersion, Proposal
from approvals.policy.dry_run import dry_run, recent_proposals
from approvals.policy.validation import VERSION_FIELDS
from approvals.services import policies
from approvals.services.policies import activate_policy_version, create_policy, create_policy_version
from approvals.services.votes import cast_vote
from approvals.states import State
from audit.models import AuditEvent, Verb
from audit.trail import record
from lib.errors import ConfigRefused, Conflict, PolicyInvalid
from tests import factories
from tests.factories import submit, totp_code, trail_name

pytestmark = pytest.mark.django_db

ACTIVE, DRAFT, RETIRED = PolicyVersion.Status.ACTIVE, PolicyVersion.Status.DRAFT, PolicyVersion.Status.RETIRED
FINANCE_1 = {
    "outcome": "require_approval",
    "tool_pattern": "payments.refund",
    "thresholds": [{"group": "finance", "count": 1}],
}


@pytest.fixture
def second_admin(tenant):
    return factories.make_user("second_admin", tenant=tenant, role="admin", groups=["admins"])


@pytest.fixture
def refunds(tenant, admin_user, reviewer_a):
    """A policy with no version yet (reviewer_a makes the finance group exist)."""
    return create_policy(tenant, slug="refunds", name="Refunds", actor=admin_user)


def status_of(version) -> str:
    version.refresh_from_db()
    return version.status


# ---------------------------------------------------------------------------------------------------
# Drafts and immutability


def test_a_new_version_is_a_draft_numbered_after_the_last(refunds, admin_user):
    first = create_policy_version(refunds, FINANCE_1, actor=admin_user)
    second = create_policy_version(refunds, {**FINANCE_1, "ttl_seconds": 600}, actor=admin_user)

    assert (first.version, first.status) == (1, DRAFT)
    assert (second.version, second.status) == (2, DRAFT)
    assert second.author == admin_user


def test_editing_creates_a_new_version_and_leaves_the_active_one_untouched(refunds, admin_user, second_admin):
    active = activate_policy_version(
        create_policy_version(refunds, FINANCE_1, actor=admin_user), actor=second_admin
    )
    snapshot = {name: getattr(active, name) for name in VERSION_FIELDS}

    finance_2 = {**FINANCE_1, "thresholds": [{"group": "finance", "count": 2}]}
    draft = create_policy_version(refunds, finance_2, actor=admin_user)

    active.refresh_from_db()
    assert {name: getattr(active, name) for name in VERSION_FIELDS} == snapshot
    assert active.status == ACTIVE
    assert draft.pk != active.pk and draft.version == active.version + 1


def test_a_draft_does_not_take_part_in_evaluation(agent, refunds, admin_user):
    create_policy_version(refunds, {"outcome": "deny", "tool_pattern": "payments.refund"}, actor=admin_user)

    proposal = submit(agent)

    assert proposal.state == State.AWAITING_REVIEW  # the tenant default, not the draft's deny
    assert proposal.policy_versions.count() == 0


def test_a_draft_with_a_cel_compile_error_is_refused_with_the_compilers_message(refunds, admin_user):
    with pytest.raises(PolicyInvalid) as invalid:
        create_policy_version(refunds, {**FINANCE_1, "condition": "double(args.amount) >"}, actor=admin_user)

    assert "Syntax error" in invalid.value.errors["condition"]
    assert not refunds.versions.exists()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({**FINANCE_1, "thresholds": [{"group": "legal", "count": 1}]}, "thresholds"),
        ({**FINANCE_1, "thresholds": []}, "thresholds"),
        ({**FINANCE_1, "step_up": "soon"}, "step_up"),
        ({**FINANCE_1, "ttl_seconds": 0}, "ttl_seconds"),
        ({**FINANCE_1, "outcome": "maybe"}, "outcome"),
        ({**FINANCE_1, "risk": "extreme"}, "risk"),
        ({**FINANCE_1, "status": "active"}, "__all__"),
    ],
)
def test_an_invalid_draft_is_refused_on_its_field(refunds, admin_user, fields, field):
    with pytest.raises(PolicyInvalid) as invalid:
        create_policy_version(refunds, fields, actor=admin_user)
    assert field in invalid.value.errors


def test_thresholds_cannot_name_another_tenants_group(refunds, admin_user, outsider):
    # "legal" exists, but in globex, not in acme.
    factories.make_group(outsider.tenant_memberships.get().tenant, "legal")
    with pytest.raises(PolicyInvalid) as invalid:
        create_policy_version(
            refunds, {**FINANCE_1, "thresholds": [{"group": "legal", "count": 1}]}, actor=admin_user
        )
    assert "unknown group" in invalid.value.errors["thresholds"]


def test_only_an_admin_of_the_tenant_writes_a_draft(refunds, reviewer_a, outsider):
    for person in (reviewer_a, outsider):
        with pytest.raises(ConfigRefused) as refused:
            create_policy_version(refunds, FINANCE_1, actor=person)
        assert refused.value.code == "not_admin"
    with pytest.raises(ConfigRefused):
        create_policy_version(refunds, FINANCE_1, actor=None)


# ---------------------------------------------------------------------------------------------------
# Four eyes and activation


def test_the_author_cannot_activate_their_own_version(refunds, admin_user):
    draft = create_policy_version(refunds, FINANCE_1, actor=admin_user)

    with pytest.raises(ConfigRefused) as refused:
        activate_policy_version(draft, actor=admin_user)

    assert refused.value.code == "four_eyes"
    assert status_of(draft) == DRAFT
    assert not AuditEvent.objects.filter(verb=Verb.POLICY_VERSION_ACTIVATED).exists()


def test_a_superuser_author_cannot_activate_their_own_version_either(refunds):
    author, _ = factories.policy_admins()
    draft = create_policy_version(refunds, FINANCE_1, actor=author)

    with pytest.raises(ConfigRefused):
        activate_policy_version(draft, actor=author)


def test_a_second_admin_activates_and_the_previous_version_is_retired(refunds, admin_user, second_admin):
    first = activate_policy_version(
        create_policy_version(refunds, FINANCE_1, actor=admin_user), actor=second_admin
    )
    draft = create_policy_version(refunds, {**FINANCE_1, "ttl_seconds": 600}, actor=second_admin)

    activated = activate_policy_version(draft, actor=admin_user)

    assert activated.status == ACTIVE
    assert activated.activated_by == admin_user and activated.activated_at is not None
    assert status_of(first) == RETIRED
    assert refunds.active_version == activated
    event = AuditEvent.objects.get(verb=Verb.POLICY_VERSION_ACTIVATED, data__version=2)
    assert event.actor == trail_name("admin")
    assert event.data == {
        "policy": "refunds",
        "version": 2,
        "author": trail_name("second_admin"),
        "retired": 1,
    }


def test_a_failed_activation_changes_nothing(refunds, admin_user, second_admin, monkeypatch):
    first = activate_policy_version(
        create_policy_version(refunds, FINANCE_1, actor=admin_user), actor=second_admin
    )
    draft = create_policy_version(refunds, {**FINANCE_1, "ttl_seconds": 600}, actor=admin_user)
    real_record = record

    def failing_record(*args, **kwargs):
        if kwargs.get("verb") == Verb.POLICY_VERSION_ACTIVATED:
            raise RuntimeError("the audit chain is unavailable")
        return real_record(*args, **kwargs)

    monkeypatch.setattr(policies, "record", failing_record)
    with pytest.raises(RuntimeError):
        activate_policy_version(draft, actor=second_admin)

    assert status_of(first) == ACTIVE
    assert status_of(draft) == DRAFT


def test_the_database_allows_one_active_version_per_policy(refunds, admin_user, second_admin):
    active = activate_policy_version(
        create_policy_version(refunds, FINANCE_1, actor=admin_user), actor=second_admin
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        PolicyVersion.objects.create(
            policy=refunds, version=active.version + 1, status=ACTIVE, outcome="deny"
        )


def test_only_a_draft_can_be_activated(refunds, admin_user, second_admin):
    first = activate_policy_version(
        create_policy_version(refunds, FINANCE_1, actor=admin_user), actor=second_admin
    )
    second = create_policy_version(refunds, FINANCE_1, actor=admin_user)
    activate_policy_version(second, actor=second_admin)

    for version in (refunds.versions.get(version=2), first):  # active, retired
        with pytest.raises(Conflict) as refused:
            activate_policy_version(version, actor=second_admin)
        assert refused.value.code == "not_draft"


def test_an_older_draft_cannot_replace_a_newer_active_version(refunds, admin_user, second_admin):
    older = create_policy_version(refunds, FINANCE_1, actor=admin_user)
    newer = create_policy_version(refunds, {**FINANCE_1, "ttl_seconds": 600}, actor=admin_user)
    activate_policy_version(newer, actor=second_admin)

    with pytest.raises(Conflict) as refused:
        activate_policy_version(older, actor=second_admin)
    assert refused.value.code == "stale_draft"


def test_only_an_admin_of_the_tenant_activates(refunds, admin_user, reviewer_a, outsider):
    draft = create_policy_version(refunds, FINANCE_1, actor=admin_user)
    for person in (reviewer_a, outsider):
        with pytest.raises(ConfigRefused) as refused:
            activate_policy_version(draft, actor=person)
        assert refused.value.code == "not_admin"
    assert status_of(draft) == DRAFT


def test_writing_and_activating_are_audited_with_the_whole_version(refunds, admin_user, second_admin):
    draft = create_policy_version(
        refunds, {**FINANCE_1, "condition": "double(args.amount) > 10.0"}, actor=admin_user
    )
    activate_policy_version(draft, actor=second_admin)

    created = AuditEvent.objects.get(verb=Verb.POLICY_VERSION_CREATED, subject="policy:refunds@1")
    assert created.actor == trail_name("admin")
    assert created.data["condition"] == "double(args.amount) > 10.0"
    assert created.data["thresholds"] == [{"group": "finance", "count": 1}]
    assert AuditEvent.objects.get(verb=Verb.POLICY_VERSION_ACTIVATED).actor == trail_name("second_admin")


def test_new_proposals_pin_the_new_version_after_activation(
    agent, refunds, admin_user, second_admin, requester
):
    v1 = activate_policy_version(
        create_policy_version(refunds, FINANCE_1, actor=admin_user), actor=second_admin
    )
    before = submit(agent)
    v2 = activate_policy_version(
        create_policy_version(
            refunds, {"outcome": "deny", "tool_pattern": "payments.refund"}, actor=admin_user
        ),
        actor=second_admin,
    )

    after = submit(agent)

    assert list(before.policy_versions.all()) == [v1]
    assert list(after.policy_versions.all()) == [v2]
    assert after.state == State.DENIED


# ---------------------------------------------------------------------------------------------------
# A policy change while proposals wait: never looser, stricter routes, a deny stops


def activate(refunds, fields, admin_user, second_admin):
    return activate_policy_version(
        create_policy_version(refunds, fields, actor=admin_user), actor=second_admin
    )


def test_a_waiting_proposal_the_new_version_denies_is_cancelled_and_its_task_cancelled(
    agent, refunds, admin_user, second_admin, requester
):
    activate(refunds, FINANCE_1, admin_user, second_admin)
    waiting = submit(agent)

    activate(refunds, {"outcome": "deny", "tool_pattern": "payments.refund"}, admin_user, second_admin)

    waiting.refresh_from_db()
    assert waiting.state == State.CANCELLED
    assert waiting.outbox.filter(kind="cancel").count() == 1


def test_a_stricter_version_routes_a_waiting_proposal_to_more_approvers(
    agent, refunds, admin_user, second_admin, requester, reviewer_a, reviewer_c
):
    activate(refunds, FINANCE_1, admin_user, second_admin)
    waiting = submit(agent)
    stricter = {**FINANCE_1, "thresholds": [{"group": "finance", "count": 1}, {"group": "ops", "count": 1}]}

    v2 = activate(refunds, stricter, admin_user, second_admin)
    cast_vote(
        waiting.id,
        reviewer_a,
        verdict="approve",
        digest_seen=waiting.action_digest,
        step_up=step_up_for(reviewer_a, factories.totp_code(reviewer_a)),
    )

    waiting.refresh_from_db()
    assert waiting.state == State.AWAITING_REVIEW  # finance alone no longer suffices
    assert {"group": "ops", "count": 1} in waiting.requirements["thresholds"]
    assert v2 in waiting.policy_versions.all()


def test_a_looser_version_does_not_loosen_a_waiting_proposal(
    agent, refunds, admin_user, second_admin, requester
):
    activate(
        refunds, {**FINANCE_1, "thresholds": [{"group": "finance", "count": 2}]}, admin_user, second_admin
    )
    waiting = submit(agent)

    activate(refunds, {"outcome": "allow", "tool_pattern": "payments.refund"}, admin_user, second_admin)

    waiting.refresh_from_db()
    assert waiting.state == State.AWAITING_REVIEW
    assert waiting.requirements["thresholds"] == [{"group": "finance", "count": 2}]


def test_an_unconsumed_approval_that_no_longer_meets_a_stricter_version_is_revoked(
    agent, refunds, admin_user, second_admin, requester, reviewer_a
):
    activate(refunds, FINANCE_1, admin_user, second_admin)
    approved = submit(agent)
    cast_vote(
        approved.id,
        reviewer_a,
        verdict="approve",
        digest_seen=approved.action_digest,
        step_up=step_up_for(reviewer_a, factories.totp_code(reviewer_a)),
    )

    activate(
        refunds, {**FINANCE_1, "thresholds": [{"group": "finance", "count": 2}]}, admin_user, second_admin
    )

    approved.refresh_from_db()
    assert approved.state == State.REVOKED
    assert approved.outbox.filter(kind="cancel").count() == 1


# ---------------------------------------------------------------------------------------------------
# Dry run


@pytest.fixture
def history(agent, refunds, admin_user, second_admin, requester):
    """Four proposals under refunds@1 (one finance approval for every refund)."""
    first = create_policy_version(refunds, FINANCE_1, actor=admin_user)
    activate_policy_version(first, actor=second_admin)
    amounts = ["40.00", "500.00", "5000.00"]
    proposals = [submit(agent, action=factories.refund_action(amount=a)) for a in amounts]
    deploy = {"tool": "deploy.release", "arguments": {"service": "api", "version": "1.2"}, "target": "api"}
    proposals.append(submit(agent, action=deploy, summary="Deploy api 1.2"))
    return proposals


def by_amount(rows) -> dict:
    return {row.proposal.action["arguments"].get("amount", row.proposal.tool): row for row in rows}


def test_dry_run_shows_which_proposals_a_draft_matches_and_the_outcome(history, refunds, admin_user):
    draft = create_policy_version(
        refunds,
        {**FINANCE_1, "outcome": "deny", "condition": "double(args.amount) > 1000.0"},
        actor=admin_user,
    )

    rows = by_amount(dry_run(draft, recent_proposals(draft.policy.tenant)))

    assert {key: row.draft_matches for key, row in rows.items()} == {
        "40.00": False,
        "500.00": False,
        "5000.00": True,
        "deploy.release": False,
    }
    assert (rows["5000.00"].outcome_now, rows["5000.00"].outcome_with_draft) == ("require_approval", "deny")
    assert rows["5000.00"].changes
    # The draft replaces refunds@1 and does not match 40.00: the tenant admins would decide it instead of
    # finance. The outcome is still require_approval, but the required approvals change.
    assert rows["40.00"].outcome_with_draft == rows["40.00"].outcome_now == "require_approval"
    assert rows["40.00"].changes


def test_dry_run_of_a_new_policy_adds_to_the_active_ones(history, tenant, admin_user):
    small = create_policy(tenant, slug="small-refunds", actor=admin_user)
    draft = create_policy_version(
        small,
        {"outcome": "allow", "tool_pattern": "payments.refund", "condition": "double(args.amount) <= 50.0"},
        actor=admin_user,
    )

    rows = by_amount(dry_run(draft, recent_proposals(tenant)))

    # refunds@1 still asks finance for the 40.00 refund, and require_approval wins over allow.
    assert rows["40.00"].draft_matches
    assert rows["40.00"].outcome_with_draft == "require_approval"
    assert [v.policy.slug for v in rows["40.00"].evaluation.versions] == ["refunds"]


def test_dry_run_of_the_active_version_reproduces_what_intake_decided(history, refunds):
    intake_outcome: dict[str, str] = {
        State.AWAITING_REVIEW: "require_approval",
        State.DENIED: "deny",
        State.ALLOWED: "allow",
    }

    rows = dry_run(refunds.active_version, recent_proposals(refunds.tenant))

    assert len(rows) == len(history)
    for row in rows:
        assert row.outcome_now == row.outcome_with_draft == intake_outcome[row.proposal.state]


def test_dry_run_writes_nothing(history, refunds, admin_user):
    draft = create_policy_version(refunds, {"outcome": "deny"}, actor=admin_user)
    events = AuditEvent.objects.count()
    states = dict(Proposal.objects.values_list("id", "state"))

    dry_run(draft, recent_proposals(refunds.tenant))

    assert AuditEvent.objects.count() == events
    assert dict(Proposal.objects.values_list("id", "state")) == states
    assert status_of(draft) == DRAFT


def test_dry_run_reads_the_tenants_newest_proposals_only(history, tenant, other_tenant):
    foreign_agent = factories.make_agent(other_tenant, slug="globex-agent")
    foreign = submit(foreign_agent)

    recent = recent_proposals(tenant, limit=2)

    assert [p.pk for p in recent] == [history[-1].pk, history[-2].pk]
    assert foreign.pk not in [p.pk for p in recent_proposals(tenant)]


def test_policies_are_created_through_the_service_and_audited(tenant, admin_user):
    created = create_policy(tenant, slug="deploys", name="Deploys", actor=admin_user)

    assert Policy.objects.get(tenant=tenant, slug="deploys") == created
    assert AuditEvent.objects.filter(subject="policy:deploys", actor=trail_name("admin")).exists()
    with pytest.raises(Conflict):
        create_policy(tenant, slug="deploys", actor=admin_user)


# ---------------------------------------------------------------------------------------------------
# Scripted: manage.py policy


def policy_command(*args) -> str:
    out = io.StringIO()
    call_command("policy", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def refunds_file(tmp_path, reviewer_a):
    path = tmp_path / "refunds.json"
    path.write_text(
        json.dumps(
            {
                "policy": "refunds",
                "name": "Refunds",
                **FINANCE_1,
                "condition": "double(args.amount) > 100.0",
                "risk": "high",
            }
        )
    )
    return path


def test_the_policy_command_drafts_from_a_file_and_a_second_admin_activates(
    tenant, refunds_file, admin_user, second_admin
):
    out = policy_command("draft", "--tenant", "acme", "--file", str(refunds_file), "--author", "admin")
    assert "another admin activates it" in out
    draft = PolicyVersion.objects.get(policy__tenant=tenant, policy__slug="refunds", version=1)
    assert (draft.status, draft.author, draft.risk) == (DRAFT, admin_user, "high")

    activate = ("activate", "--tenant", "acme", "--policy", "refunds", "--version", "1")
    with pytest.raises(CommandError, match="cannot activate"):
        policy_command(*activate, "--approver", "admin", "--code", totp_code(admin_user))
    policy_command(*activate, "--approver", "second_admin", "--code", totp_code(second_admin))

    assert status_of(draft) == ACTIVE
    assert "v1  active" in policy_command("show", "--tenant", "acme")


def test_the_policy_command_activates_only_with_the_approvers_own_fresh_code(
    tenant, refunds_file, admin_user, second_admin
):
    policy_command("draft", "--tenant", "acme", "--file", str(refunds_file), "--author", "admin")
    draft = PolicyVersion.objects.get(policy__tenant=tenant, policy__slug="refunds", version=1)
    activate = ("activate", "--tenant", "acme", "--policy", "refunds", "--version", "1", "--approver")
    # Naming the second admin is not enough: whoever runs the command needs that admin's code.
    with pytest.raises(CommandError, match="one-time code is required"):
        policy_command(*activate, "second_admin")
    with pytest.raises(CommandError, match="not a valid one-time code of second_admin"):
        policy_command(*activate, "second_admin", "--code", "000000")
    with pytest.raises(CommandError, match="not a valid one-time code of second_admin"):
        policy_command(*activate, "second_admin", "--code", totp_code(admin_user))  # the author's own code
    assert status_of(draft) == DRAFT  # (with the right code it activates: the test above)


def test_the_policy_command_shows_the_compilers_message(tenant, tmp_path, admin_user, reviewer_a):
    path = tmp_path / "broken.json"
    path.write_text(json.dumps({"policy": "refunds", **FINANCE_1, "condition": "double(args.amount) >"}))

    with pytest.raises(CommandError, match="Syntax error"):
        policy_command("draft", "--tenant", "acme", "--file", str(path), "--author", "admin")


def test_the_policy_command_dry_runs_a_draft(history, refunds, admin_user):
    create_policy_version(
        refunds,
        {**FINANCE_1, "outcome": "deny", "condition": "double(args.amount) > 1000.0"},
        actor=admin_user,
    )

    out = policy_command("dry-run", "--tenant", "acme", "--policy", "refunds", "--version", "2")

    assert "require_approval -> deny" in out
    assert "4 proposals; the draft matches 1; changes (outcome or required approvals): 3" in out
