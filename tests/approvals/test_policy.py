"""Policy evaluation (DESIGN.md "Policy"): table-driven over in-memory versions, then at intake.

The table covers: any deny wins; approval requirements merge (union of thresholds, the strictest
step-up, the shortest TTL, self-approval only if every policy allows it); nothing matching falls to the
tenant default, which fails closed; CEL compile and runtime errors never allow; tool and agent globs.
"""

from dataclasses import dataclass, field
from itertools import count

import jwt
import pytest

from accounts.stepup import step_up_for
from approvals.models import Decision, OutboxMessage, Policy, PolicyVersion
from approvals.policy.evaluation import compile_condition, evaluate, evaluation_context
from approvals.policy.step_up import validate_step_up
from approvals.policy.validation import thresholds_error, version_field_errors
from approvals.services.policies import POLICY_VERSION_DEFAULTS
from approvals.services.votes import cast_vote
from approvals.states import State
from audit.models import AuditEvent, Verb
from lib.errors import VoteRefused
from tenants.models import ApproverGroup, Tenant
from tests import factories
from tests.factories import submit, totp_code

ALLOW = PolicyVersion.Outcome.ALLOW
DENY = PolicyVersion.Outcome.DENY
APPROVAL = PolicyVersion.Outcome.REQUIRE_APPROVAL

_ids = count(1)


def tenant_in_memory(admin_group_slug: str | None = "admins") -> Tenant:
    tenant = Tenant(id=1, slug="acme", name="Acme", default_ttl_seconds=7200)
    if admin_group_slug:
        tenant.admin_group = ApproverGroup(id=99, tenant=tenant, slug=admin_group_slug, name="Admins")
    return tenant


def v(
    slug: str,
    outcome: str,
    *,
    tool="*",
    agent="*",
    condition="",
    thresholds=(),
    step_up="per_vote",
    ttl=3600,
    self_approval=False,
    consume=True,
    risk="",
) -> PolicyVersion:
    """An active version in memory: evaluation is a pure function over these."""
    owner = Policy(id=next(_ids), tenant=tenant_in_memory(), slug=slug, name=slug)
    return PolicyVersion(
        policy=owner,
        version=1,
        status=PolicyVersion.Status.ACTIVE,
        outcome=outcome,
        tool_pattern=tool,
        agent_pattern=agent,
        condition=condition,
        thresholds=[{"group": g, "count": c} for g, c in thresholds],
        step_up=step_up,
        ttl_seconds=ttl,
        allow_self_approval=self_approval,
        consume_online=consume,
        risk=risk,
    )


def context(
    *, tool="payments.refund", amount="40.00", principal="requester", agent="refund-demo", reversible=False
) -> dict:
    return evaluation_context(
        tool=tool,
        args={"order_id": "1182", "amount": amount, "currency": "EUR"},
        principal={"id": principal, "display": principal.title()},
        agent=agent,
        consequences={"effect": "Money leaves the merchant account", "reversible": reversible},
    )


@dataclass
class Case:
    name: str
    versions: list[PolicyVersion]
    outcome: str
    ctx: dict = field(default_factory=context)
    decided_by: list[str] | None = None  # slugs of the versions the evaluation names (None: don't check)
    thresholds: list[dict] | None = None
    step_up: str | None = None
    ttl: int | None = None
    self_approval: bool | None = None
    consume: bool | None = None
    has_errors: bool = False


FAIL_CLOSED = [{"group": "admins", "count": 1}]

CASES = [
    # The tenant default: nothing matches -> one tenant admin, a fresh code per vote, the tenant's TTL.
    Case(
        "no policies: the tenant default fails closed",
        [],
        APPROVAL,
        decided_by=[],
        thresholds=FAIL_CLOSED,
        step_up="per_vote",
        ttl=7200,
    ),
    Case(
        "no policy matches the tool: the tenant default",
        [v("deploys", ALLOW, tool="deploy.*")],
        APPROVAL,
        decided_by=[],
        thresholds=FAIL_CLOSED,
    ),
    # Outcomes and deny-wins.
    Case(
        "a matching allow releases without people",
        [v("small", ALLOW, tool="payments.refund")],
        ALLOW,
        decided_by=["small"],
    ),
    Case("a matching deny denies", [v("never", DENY)], DENY, decided_by=["never"]),
    Case("deny wins over allow", [v("small", ALLOW), v("never", DENY)], DENY, decided_by=["never"]),
    Case(
        "deny wins over require_approval, and only the deny is named",
        [v("refunds", APPROVAL, thresholds=[("finance", 1)]), v("never", DENY)],
        DENY,
        decided_by=["never"],
    ),
    Case(
        "require_approval wins over allow",
        [v("small", ALLOW), v("refunds", APPROVAL, thresholds=[("finance", 1)])],
        APPROVAL,
        decided_by=["refunds"],
        thresholds=[{"group": "finance", "count": 1}],
    ),
    # Merging approval requirements.
    Case(
        "thresholds of different groups are all required (union)",
        [v("a", APPROVAL, thresholds=[("finance", 1)]), v("b", APPROVAL, thresholds=[("ops", 2)])],
        APPROVAL,
        decided_by=["a", "b"],
        thresholds=[{"group": "finance", "count": 1}, {"group": "ops", "count": 2}],
    ),
    Case(
        "the same group named twice keeps the higher count",
        [v("a", APPROVAL, thresholds=[("finance", 1)]), v("b", APPROVAL, thresholds=[("finance", 3)])],
        APPROVAL,
        thresholds=[{"group": "finance", "count": 3}],
    ),
    Case(
        "per_vote is stricter than any window",
        [
            v("a", APPROVAL, thresholds=[("finance", 1)], step_up="300"),
            v("b", APPROVAL, thresholds=[("ops", 1)], step_up="per_vote"),
        ],
        APPROVAL,
        step_up="per_vote",
    ),
    Case(
        "between two windows the shorter one wins",
        [
            v("a", APPROVAL, thresholds=[("finance", 1)], step_up="600"),
            v("b", APPROVAL, thresholds=[("ops", 1)], step_up="300"),
        ],
        APPROVAL,
        step_up="300",
    ),
    Case(
        "the shortest TTL wins",
        [
            v("a", APPROVAL, thresholds=[("finance", 1)], ttl=3600),
            v("b", APPROVAL, thresholds=[("ops", 1)], ttl=600),
        ],
        APPROVAL,
        ttl=600,
    ),
    Case(
        "self-approval only when every matching policy allows it",
        [
            v("a", APPROVAL, thresholds=[("finance", 1)], self_approval=True),
            v("b", APPROVAL, thresholds=[("ops", 1)], self_approval=False),
        ],
        APPROVAL,
        self_approval=False,
    ),
    Case(
        "self-approval when every matching policy allows it",
        [v("a", APPROVAL, thresholds=[("finance", 1)], self_approval=True)],
        APPROVAL,
        self_approval=True,
    ),
    Case(
        "online consumption when any policy asks for it",
        [
            v("a", APPROVAL, thresholds=[("finance", 1)], consume=False),
            v("b", APPROVAL, thresholds=[("ops", 1)], consume=True),
        ],
        APPROVAL,
        consume=True,
    ),
    Case(
        "an approval policy naming no group still fails closed to the tenant admins",
        [v("empty", APPROVAL, thresholds=[])],
        APPROVAL,
        thresholds=FAIL_CLOSED,
    ),
    # Tool and agent globs (case-sensitive, fnmatch).
    Case("tool glob payments.* matches payments.refund", [v("pay", DENY, tool="payments.*")], DENY),
    Case(
        "tool glob payments.* does not match payroll.run",
        [v("pay", DENY, tool="payments.*")],
        APPROVAL,
        ctx=context(tool="payroll.run"),
        decided_by=[],
    ),
    Case(
        "tool glob *.delete matches db.delete",
        [v("deletes", DENY, tool="*.delete")],
        DENY,
        ctx=context(tool="db.delete"),
    ),
    Case("tool globs are case-sensitive", [v("pay", DENY, tool="Payments.*")], APPROVAL, decided_by=[]),
    Case("agent glob refund-* matches refund-demo", [v("refund-agents", ALLOW, agent="refund-*")], ALLOW),
    Case(
        "agent glob refund-* does not match deploy-bot",
        [v("refund-agents", ALLOW, agent="refund-*")],
        APPROVAL,
        ctx=context(agent="deploy-bot"),
        decided_by=[],
    ),
    Case(
        "both globs must match", [v("p", ALLOW, agent="refund-*", tool="deploy.*")], APPROVAL, decided_by=[]
    ),
    # CEL conditions over tool, args, principal, agent, consequences.
    Case(
        "a false condition does not match",
        [v("big", DENY, condition="double(args.amount) > 100.0")],
        APPROVAL,
        decided_by=[],
    ),
    Case(
        "a true condition matches",
        [v("big", DENY, condition="double(args.amount) > 100.0")],
        DENY,
        ctx=context(amount="500.00"),
    ),
    Case(
        "condition over principal",
        [v("vip", ALLOW, condition='principal.id == "vip"')],
        ALLOW,
        ctx=context(principal="vip"),
    ),
    Case(
        "condition over agent and tool",
        [v("x", ALLOW, condition='agent == "refund-demo" && tool.startsWith("payments.")')],
        ALLOW,
    ),
    Case(
        "condition over consequences", [v("irreversible", DENY, condition="!consequences.reversible")], DENY
    ),
    # Errors never allow.
    Case(
        "a runtime error in an allow policy does not allow (missing field)",
        [v("broken", ALLOW, condition="args.missing == 1")],
        APPROVAL,
        decided_by=[],
        thresholds=FAIL_CLOSED,
        has_errors=True,
    ),
    Case(
        "a runtime error in an allow policy does not allow (type error)",
        [v("broken", ALLOW, condition="args.amount > 10")],
        APPROVAL,
        decided_by=[],
        has_errors=True,
    ),
    Case(
        "an allow condition that is not a bool does not allow",
        [v("broken", ALLOW, condition="args.amount")],
        APPROVAL,
        decided_by=[],
        has_errors=True,
    ),
    Case(
        "an uncompilable stored condition does not allow",
        [v("broken", ALLOW, condition="args.amount >")],
        APPROVAL,
        decided_by=[],
        has_errors=True,
    ),
    Case(
        "a runtime error in a deny policy counts as a match: denied",
        [v("broken-deny", DENY, condition="args.missing == 1"), v("small", ALLOW)],
        DENY,
        decided_by=["broken-deny"],
        has_errors=True,
    ),
    Case(
        "a runtime error in an approval policy counts as a match: its requirements apply",
        [v("broken", APPROVAL, condition="args.missing == 1", thresholds=[("finance", 2)])],
        APPROVAL,
        decided_by=["broken"],
        thresholds=[{"group": "finance", "count": 2}],
        has_errors=True,
    ),
    Case(
        "a broken allow does not stop a sound allow",
        [v("broken", ALLOW, condition="args.missing == 1"), v("small", ALLOW)],
        ALLOW,
        decided_by=["small"],
        has_errors=True,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_evaluation_table(case: Case):
    result = evaluate(tenant_in_memory(), case.versions, case.ctx)

    assert result.outcome == case.outcome
    if case.decided_by is not None:
        assert sorted(version.policy.slug for version in result.versions) == sorted(case.decided_by)
    if case.thresholds is not None:
        assert result.thresholds == case.thresholds
    if case.step_up is not None:
        assert result.step_up == case.step_up
    if case.ttl is not None:
        assert result.ttl_seconds == case.ttl
    if case.self_approval is not None:
        assert result.self_approval is case.self_approval
    if case.consume is not None:
        assert result.consume is case.consume
    assert bool(result.errors) is case.has_errors


def test_the_tenant_default_names_the_tenants_own_admin_group():
    result = evaluate(tenant_in_memory("security-officers"), [], context())
    assert result.thresholds == [{"group": "security-officers", "count": 1}]


def test_a_tenant_without_admin_group_still_fails_closed():
    result = evaluate(tenant_in_memory(None), [], context())
    assert result.outcome == APPROVAL
    assert result.thresholds == [{"group": "admins", "count": 1}]


# ---------------------------------------------------------------------------------------------------
# Compile errors and field validation


@pytest.mark.parametrize("source", ["args.amount >", "foo(", "1 +", "tool ==="])
def test_cel_compile_errors_are_value_errors_with_the_compilers_message(source):
    with pytest.raises(ValueError, match="Syntax error"):
        compile_condition(source)


def test_version_field_errors_carry_the_cel_compiler_message():
    errors = version_field_errors(
        {**POLICY_VERSION_DEFAULTS, "outcome": DENY, "condition": "args.amount >"}, set()
    )
    assert "Syntax error" in errors["condition"]


def test_a_number_json_does_not_keep_exactly_is_refused_on_its_field():
    """Its version's audit event could not be hashed once stored (audit.chain refuses it too)."""
    errors = version_field_errors({**POLICY_VERSION_DEFAULTS, "outcome": DENY, "ttl_seconds": 2**60}, set())

    assert errors == {
        "ttl_seconds": f"{2**60} is too large: numbers in a policy lie within ±9007199254740991"
    }


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("per_vote", True),
        ("300", True),
        ("1", True),
        ("0", False),
        ("-5", False),
        ("abc", False),
        ("", False),
        ("١٢", False),
        ("30s", False),
    ],
)
def test_step_up_is_per_vote_or_a_positive_window_in_seconds(value, valid):
    if valid:
        assert validate_step_up(value) == value
    else:
        with pytest.raises(ValueError):
            validate_step_up(value)


@pytest.mark.parametrize(
    ("thresholds", "problem"),
    [
        ([{"group": "finance", "count": 1}], None),
        ([{"group": "finance", "count": 1}, {"group": "ops", "count": 2}], None),
        ({"group": "finance"}, "JSON list"),
        ([{"group": "finance"}], "exactly"),
        ([{"group": "legal", "count": 1}], "unknown group"),
        ([{"group": "finance", "count": 0}], "at least 1"),
        ([{"group": "finance", "count": "2"}], "whole number"),
        ([{"group": "finance", "count": True}], "whole number"),
        ([{"group": "finance", "count": 1}, {"group": "finance", "count": 2}], "named twice"),
    ],
)
def test_thresholds_must_name_the_tenants_groups_with_positive_counts(thresholds, problem):
    error = thresholds_error(thresholds, {"finance", "ops"})
    if problem is None:
        assert error is None
    else:
        assert error is not None and problem in error


def test_an_approval_policy_must_name_a_threshold():
    errors = version_field_errors({**POLICY_VERSION_DEFAULTS, "outcome": APPROVAL}, {"finance"})
    assert "thresholds" in errors


# ---------------------------------------------------------------------------------------------------
# At intake (services.submit_proposal -> _evaluate_and_route)


def claims_of(decision: Decision) -> dict:
    return jwt.decode(decision.token, options={"verify_signature": False})


@pytest.mark.django_db
def test_a_deny_at_intake_denies_and_sends_a_signed_rejection_naming_the_policy(agent, reviewer_a):
    factories.make_policy(
        agent.tenant, "refunds", tool_pattern="payments.*", thresholds=[{"group": "finance", "count": 1}]
    )
    deny = factories.make_policy(
        agent.tenant,
        "no-big-refunds",
        outcome=DENY,
        tool_pattern="payments.refund",
        condition="double(args.amount) > 1000.0",
        thresholds=[],
    )

    proposal = submit(agent, action=factories.refund_action(amount="5000.00"))

    assert proposal.state == State.DENIED
    decision = Decision.objects.get(proposal=proposal)
    claims = claims_of(decision)
    assert claims["decision"] == "rejected"
    assert "no-big-refunds" in claims["reason"]
    assert claims["approvers"] == [
        {
            "sub": "policy:no-big-refunds@1",
            "name": "no big refunds",
            "group": None,
            "auth": {"method": "policy"},
            "reason": "",
            "reservation": "",
        }
    ]
    assert claims["policy"] == {"id": "no-big-refunds", "version": 1}
    assert claims["consume"] is False
    assert list(proposal.policy_versions.all()) == [deny]
    assert OutboxMessage.objects.filter(proposal=proposal, kind="continue").count() == 1


@pytest.mark.django_db
def test_no_reviewer_can_override_a_policy_deny(agent, reviewer_a):
    factories.make_policy(agent.tenant, "never", outcome=DENY, thresholds=[])
    proposal = submit(agent)

    with pytest.raises(VoteRefused) as refused:
        cast_vote(
            proposal.id,
            reviewer_a,
            verdict="approve",
            digest_seen=proposal.action_digest,
            step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
        )
    assert refused.value.code == "not_open"
    proposal.refresh_from_db()
    assert proposal.state == State.DENIED


@pytest.mark.django_db
def test_an_allow_at_intake_issues_a_decision_signed_with_the_policy_as_approver(agent):
    allow = factories.make_policy(
        agent.tenant,
        "small-refunds",
        outcome=ALLOW,
        tool_pattern="payments.refund",
        condition="double(args.amount) <= 50.0",
        thresholds=[],
        consume_online=False,
    )

    proposal = submit(agent, action=factories.refund_action(amount="40.00"))

    assert proposal.state == State.ALLOWED
    claims = claims_of(Decision.objects.get(proposal=proposal))
    assert claims["decision"] == "approved"
    assert claims["approvers"][0]["sub"] == "policy:small-refunds@1"
    assert claims["approvers"][0]["auth"] == {"method": "policy"}
    assert claims["policy"] == {"id": "small-refunds", "version": 1}
    assert claims["consume"] is False
    assert list(proposal.policy_versions.all()) == [allow]


@pytest.mark.django_db
def test_requirements_of_all_matching_policies_merge_at_intake(agent):
    factories.make_policy(
        agent.tenant,
        "refunds",
        tool_pattern="payments.*",
        step_up="300",
        ttl_seconds=3600,
        thresholds=[{"group": "finance", "count": 1}],
    )
    factories.make_policy(
        agent.tenant,
        "big-refunds",
        condition="double(args.amount) > 100.0",
        ttl_seconds=600,
        step_up="per_vote",
        thresholds=[{"group": "ops", "count": 2}],
    )

    proposal = submit(agent, action=factories.refund_action(amount="500.00"))

    assert proposal.state == State.AWAITING_REVIEW
    assert proposal.requirements["thresholds"] == [
        {"group": "finance", "count": 1},
        {"group": "ops", "count": 2},
    ]
    assert proposal.requirements["step_up"] == "per_vote"
    assert proposal.requirements["ttl_seconds"] == 600
    assert (proposal.expires_at - proposal.created_at).total_seconds() == pytest.approx(600, abs=1)
    assert sorted(v.policy.slug for v in proposal.policy_versions.all()) == ["big-refunds", "refunds"]


@pytest.mark.django_db
def test_no_match_at_intake_needs_a_tenant_admin_and_nobody_else(agent, reviewer_a, admin_user):
    factories.make_policy(agent.tenant, "deploys", tool_pattern="deploy.*", outcome=ALLOW, thresholds=[])
    proposal = submit(agent, consequences={"effect": "Money back to the customer", "reversible": True})

    assert proposal.state == State.AWAITING_REVIEW
    assert proposal.reversibility == "R2"  # the agent says reversible; nobody classified deploys: R2
    assert proposal.requirements["thresholds"] == [{"group": "admins", "count": 1}]
    assert proposal.policy_versions.count() == 0
    with pytest.raises(VoteRefused) as refused:
        cast_vote(
            proposal.id,
            reviewer_a,
            verdict="approve",
            digest_seen=proposal.action_digest,
            step_up=step_up_for(reviewer_a, totp_code(reviewer_a)),
        )
    assert refused.value.code == "not_eligible"

    cast_vote(
        proposal.id,
        admin_user,
        verdict="approve",
        digest_seen=proposal.action_digest,
        step_up=step_up_for(admin_user, totp_code(admin_user)),
    )
    proposal.refresh_from_db()
    assert proposal.state == State.APPROVED


@pytest.mark.django_db
def test_a_runtime_error_at_intake_never_allows_and_is_recorded(agent):
    factories.make_policy(
        agent.tenant, "sloppy", outcome=ALLOW, condition="args.coupon == 'FREE'", thresholds=[]
    )

    proposal = submit(agent)

    assert proposal.state == State.AWAITING_REVIEW
    evaluated = AuditEvent.objects.get(subject=f"proposal:{proposal.id}", verb=Verb.POLICY_EVALUATED)
    assert evaluated.data["outcome"] == "require_approval"
    assert "sloppy" in evaluated.data["errors"][0]


@pytest.mark.django_db
def test_a_waiting_proposal_keeps_its_pinned_version_and_takes_on_a_stricter_one(agent, refund_policy):
    before = submit(agent)
    newer = factories.make_policy(
        agent.tenant, "refunds", tool_pattern="payments.refund", thresholds=[{"group": "finance", "count": 2}]
    )
    after = submit(agent)
    before.refresh_from_db()

    assert set(before.policy_versions.all()) == {refund_policy, newer}
    assert before.requirements["thresholds"] == [{"group": "finance", "count": 2}]
    assert list(after.policy_versions.all()) == [newer]
    assert after.requirements["thresholds"] == [{"group": "finance", "count": 2}]
