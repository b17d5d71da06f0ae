"""Policy evaluation: what DESIGN.md "Policy" says, as pure functions over active PolicyVersions.

All matching active versions are evaluated. Any deny wins. Allows release without people. Approval
requirements merge: union of thresholds (the higher count per group), the strictest step-up, the
shortest TTL, self-approval only if every matching policy allows it, online consumption if any asks.
Nothing matching falls to the tenant default, which fails closed: one approval by the tenant admins.

A condition that cannot be evaluated (a missing field, a type error) never lets anything through:
for deny and require_approval policies it counts as a match; an allow policy with an error does not
allow, and its proposal needs the tenant admins instead. An approval that names no group also falls
to the tenant admins.

The same rules check a draft before it is stored (`version_field_errors`: the CEL compiler's message,
thresholds naming the tenant's groups) and replay recent proposals against it (`dry_run`).
"""

import fnmatch
from dataclasses import dataclass, field
from functools import lru_cache

import cel

from approvals.models import PolicyVersion
from approvals.models.risk import Risk, riskiest
from approvals.policy import classification
from approvals.policy import notifications as notify_rules
from approvals.policy.classification import UNCLASSIFIED
from approvals.policy.history import policy_counts, target_key
from approvals.policy.reserved import GRANT_TOOL
from approvals.policy.step_up import PER_VOTE, mode_of, stricter_step_up
from tenants.models import Tenant

HISTORY_COUNTS = (
    "count_24h",
    "count_succeeded_24h",
    "count_released_24h",
    "count_rejected_24h",
    "count_open",
)

# The tenant default is a policy too: decisions it shaped name it like any version, so a strict agent
# never sees `"policy": null`. Its rule (one approval by the tenant admins, a code per vote) changes only
# with this code; bump the version when it does. Its parameters (which group, which TTL) are in the
# decision's `quorum.required` and the proposal's requirements.
TENANT_DEFAULT_ID = "tenant-default"
TENANT_DEFAULT_VERSION = 1
TENANT_DEFAULT_REF = {"id": TENANT_DEFAULT_ID, "version": TENANT_DEFAULT_VERSION}


class PolicyConditionError(ValueError):
    pass


@lru_cache(maxsize=512)
def compile_condition(source: str):
    """Compile a CEL expression; raises ValueError with the compiler's message."""
    return cel.compile(source)


def condition_matches(source: str, context: dict) -> bool:
    if not source.strip():
        return True
    try:
        result = compile_condition(source).execute(context)
    except Exception as error:  # CEL raises KeyError, RuntimeError, TypeError... for runtime faults
        raise PolicyConditionError(f"condition could not be evaluated: {error}") from error
    if not isinstance(result, bool):
        raise PolicyConditionError(f"condition returned {type(result).__name__}, not bool")
    return result


@dataclass
class Evaluation:
    outcome: str  # allow | deny | require_approval
    versions: list[PolicyVersion] = field(default_factory=list)
    thresholds: list[dict] = field(default_factory=list)
    step_up: str = PER_VOTE
    ttl_seconds: int = 3600
    self_approval: bool = False
    consume: bool = True
    risk: str = ""
    reservation_second: bool = False
    reason: str = ""
    errors: list[str] = field(default_factory=list)
    # True when the tenant default shaped the requirements (nothing matched, or no group was named).
    tenant_default: bool = False
    # Reminders, escalation, expiry note and chat decisions (approvals/policy/notifications.py); {}: none.
    follow_up: dict = field(default_factory=dict)

    @property
    def requirements(self) -> dict:
        requirements = {
            "thresholds": self.thresholds,
            "step_up": self.step_up,
            "self_approval": self.self_approval,
            "consume": self.consume,
            "ttl_seconds": self.ttl_seconds,
            **({"reservation_second": True} if self.reservation_second else {}),
            **self.follow_up,
        }
        if self.tenant_default:
            requirements["tenant_default"] = True  # only when true: older rows compare equal
        return requirements


def evaluation_context(
    *,
    tool: str,
    args: dict,
    principal: dict,
    agent: str,
    consequences: dict,
    history: dict | None = None,
    reversibility: str = UNCLASSIFIED,
) -> dict:
    return {
        # R0 read-only .. R3 irreversible (approvals/policy/classification.py); a condition compares strings.
        "reversibility": reversibility,
        "tool": tool,
        "args": args,
        "principal": principal,
        "agent": agent,
        "consequences": consequences,
        # Earlier proposals on the same target (policy/history.py): e.g. history.count_succeeded_24h.
        "history": history if history is not None else policy_counts(None),
    }


def pattern_matches(version: PolicyVersion, agent_slug: str, tool: str) -> bool:
    return fnmatch.fnmatchcase(agent_slug, version.agent_pattern or "*") and fnmatch.fnmatchcase(
        tool, version.tool_pattern or "*"
    )


def evaluate(tenant: Tenant, versions: list[PolicyVersion], context: dict) -> Evaluation:
    """Decide over the given active versions (the caller loads them; see active_versions_for). For a tool
    no policy names (only "*"-style patterns matched), a risk hint from the tool's name only makes it
    stricter: an allow becomes the tenant default's review, and the risk becomes high."""
    evaluation = _evaluate(tenant, versions, context)
    if context["tool"] == GRANT_TOOL and evaluation.outcome == "allow":
        # A standing grant spares people later calls: only people may give one, never a policy alone.
        by_people = tenant_default(
            tenant, evaluation.errors, reversibility=context.get("reversibility", UNCLASSIFIED)
        )
        by_people.reason = "a standing grant is always decided by people: the tenant default decides"
        return by_people
    hint = classification.risk_hint(context["tool"])
    if not hint or any(version.tool_pattern not in ("", "*") for version in evaluation.versions):
        return evaluation
    if evaluation.outcome == "allow":
        stricter = tenant_default(
            tenant, evaluation.errors, reversibility=context.get("reversibility", UNCLASSIFIED)
        )
        stricter.reason = (
            f"the tool's name suggests {hint}, which no policy names: the tenant default decides"
        )
        return stricter
    if evaluation.outcome == "require_approval":
        evaluation.risk = Risk.HIGH
    return evaluation


def _evaluate(tenant: Tenant, versions: list[PolicyVersion], context: dict) -> Evaluation:
    matched: list[PolicyVersion] = []
    errors: list[str] = []
    for version in versions:
        if not pattern_matches(version, context["agent"], context["tool"]):
            continue
        try:
            hit = condition_matches(version.condition, context)
        except PolicyConditionError as error:
            errors.append(f"{version}: {error}")
            if version.outcome == PolicyVersion.Outcome.ALLOW:
                continue  # an error never allows
            hit = True
        if hit:
            matched.append(version)

    denies = [v for v in matched if v.outcome == PolicyVersion.Outcome.DENY]
    if denies:
        names = ", ".join(str(v) for v in denies)
        return Evaluation(
            "deny",
            versions=denies,
            reason=f"denied by policy {names}",
            errors=errors,
            risk=Risk.HIGH,
            consume=False,
        )

    approvals = [v for v in matched if v.outcome == PolicyVersion.Outcome.REQUIRE_APPROVAL]
    if approvals:
        return _merge_requirements(tenant, approvals, errors)

    allows = [v for v in matched if v.outcome == PolicyVersion.Outcome.ALLOW]
    if allows:
        return Evaluation(
            "allow",
            versions=allows,
            reason=f"allowed by policy {allows[0]}",
            ttl_seconds=min(v.ttl_seconds for v in allows),
            consume=any(v.consume_online for v in allows),
            risk=riskiest(v.risk for v in allows),
            errors=errors,
        )

    return tenant_default(tenant, errors, reversibility=context.get("reversibility", UNCLASSIFIED))


def stricter_requirements(*requirements: dict) -> dict:
    """What all of them demand (the one merge rule): every group at the highest count, the strictest
    step-up, the shortest TTL, self-approval only if all allow it, online consumption if any asks."""
    counts: dict[str, int] = {}
    for each in requirements:
        for threshold in each.get("thresholds") or []:
            counts[threshold["group"]] = max(counts.get(threshold["group"], 0), int(threshold["count"]))
    step_up = mode_of(requirements[0])
    for each in requirements[1:]:
        step_up = stricter_step_up(step_up, mode_of(each))
    merged = {
        "thresholds": [{"group": group, "count": count} for group, count in sorted(counts.items())],
        "step_up": step_up,
        "self_approval": all(bool(each.get("self_approval")) for each in requirements),
        "consume": any(bool(each.get("consume", True)) for each in requirements),
        "ttl_seconds": min(int(each.get("ttl_seconds") or 10**9) for each in requirements),
        # Only present when asked for, so requirements pinned before reservations existed read the same.
        **(
            {"reservation_second": True}
            if any(each.get("reservation_second") for each in requirements)
            else {}
        ),
    }
    merged.update(notify_rules.merged(list(requirements)))
    if any(each.get("tenant_default") for each in requirements):
        merged["tenant_default"] = True  # the default's approval still stands in what was merged
    return merged


def version_requirements(version: PolicyVersion) -> dict:
    return {
        "thresholds": version.thresholds or [],
        "step_up": version.step_up,
        "self_approval": version.allow_self_approval,
        "consume": version.consume_online,
        "ttl_seconds": version.ttl_seconds,
        **({"reservation_second": True} if version.reservation_needs_second else {}),
        **notify_rules.pinned(version.notifications or {}),
    }


def _merge_requirements(tenant: Tenant, versions: list[PolicyVersion], errors: list[str]) -> Evaluation:
    merged = stricter_requirements(*(version_requirements(version) for version in versions))
    by_default = not merged["thresholds"]
    if by_default:
        # An approval nobody is named for could never be given; fall back to the tenant admins (fail closed).
        merged["thresholds"] = [{"group": _admin_group_slug(tenant), "count": 1}]
    return Evaluation(
        "require_approval",
        versions=versions,
        thresholds=merged["thresholds"],
        step_up=merged["step_up"],
        ttl_seconds=merged["ttl_seconds"],
        self_approval=merged["self_approval"],
        consume=merged["consume"],
        reservation_second=merged.get("reservation_second", False),
        follow_up=notify_rules.merged([version_requirements(v) for v in versions]),
        risk=riskiest(v.risk for v in versions),
        reason="requires approval by " + ", ".join(str(v) for v in versions),
        errors=errors,
        tenant_default=by_default,
    )


def tenant_default(
    tenant: Tenant, errors: list[str] | None = None, *, reversibility: str = UNCLASSIFIED
) -> Evaluation:
    """Fail closed: one approval by the tenant's admin group, a fresh code per vote; two approvals for an
    irreversible (R3) action."""
    return Evaluation(
        "require_approval",
        thresholds=[{"group": _admin_group_slug(tenant), "count": 2 if reversibility == "R3" else 1}],
        step_up=PER_VOTE,
        ttl_seconds=tenant.default_ttl_seconds,
        reason="no policy matched: the tenant default requires approval by the tenant admins",
        risk=Risk.HIGH,
        errors=errors or [],
        tenant_default=True,
    )


def shaping_refs(versions: list[PolicyVersion], requirements: dict) -> tuple[dict, list[dict]]:
    """The decision's `policy` and `policies` claims (DESIGN "A2A contract", README "Changes to the
    contract"): `policies` names every version that shaped the requirements (sorted by policy id, then
    version; the tenant default last when it contributed); `policy` is one of them, kept for agents that
    read one object: the newest version of the first policy, or the tenant default when no policy
    matched. Never null."""
    ordered = sorted(versions, key=lambda v: (v.policy.slug, v.version))
    policies = [v.ref for v in ordered]
    if requirements.get("tenant_default") or not policies:
        policies.append(dict(TENANT_DEFAULT_REF))
    if ordered:
        first_policy = ordered[0].policy.slug
        primary = [v for v in ordered if v.policy.slug == first_policy][-1].ref
    else:
        primary = dict(TENANT_DEFAULT_REF)
    return primary, policies


def _admin_group_slug(tenant: Tenant) -> str:
    # Without an admin group nobody can approve: still closed, never open.
    return tenant.admin_group.slug if tenant.admin_group else "admins"


def active_versions_query(tenant: Tenant):
    """The tenant's active versions, each with its policy, in policy order: one query, whatever their
    number. Intake reads it annotated with what else it needs to know (approvals/services/intake/read.py)."""
    return (
        PolicyVersion.objects.filter(policy__tenant=tenant, status=PolicyVersion.Status.ACTIVE)
        .select_related("policy")
        .order_by("policy__slug")
    )


def active_versions_for(tenant: Tenant, query=None) -> list[PolicyVersion]:
    """One query, whatever the number of policies: each version's policy comes with it, and its tenant
    is the one given (naming a version, str(), reads it). `query`: active_versions_query(tenant),
    annotated by the caller."""
    versions = list(active_versions_query(tenant) if query is None else query)
    for version in versions:
        version.policy.tenant = tenant
    return versions


def context_for_proposal(
    proposal, *, history: dict | None = None, versions: list[PolicyVersion] | None = None
) -> dict:
    """The CEL context of a proposal: what intake evaluated, and what a dry run replays. Intake passes
    the history counts and the active versions it read already (in one query); otherwise both are
    read here."""
    return evaluation_context(
        tool=proposal.tool,
        args=proposal.action.get("arguments", {}),
        principal={"id": proposal.principal_id, "display": proposal.principal_display},
        agent=proposal.agent.slug,
        consequences=proposal.consequences,
        history=policy_counts(proposal) if history is None else history,
        reversibility=classified_reversibility(
            proposal.tenant, proposal.agent.slug, proposal.tool, proposal.consequences, versions
        ),
    )


def classified_reversibility(
    tenant: Tenant,
    agent_slug: str,
    tool: str,
    consequences: dict,
    versions: list[PolicyVersion] | None = None,
) -> str:
    """The strictest of the agent's statement and the admins' classification of this tool (the
    reversibility of every active version whose patterns match); R2 when nobody classifies it.
    `versions`: the tenant's active versions, when the caller has them."""
    admin_classes = [
        version.reversibility
        for version in (active_versions_for(tenant) if versions is None else versions)
        if version.reversibility and pattern_matches(version, agent_slug, tool)
    ]
    return classification.reversibility(consequences, admin_classes)


def tool_classification(agent_slug: str, tool: str, versions: list[PolicyVersion]) -> tuple[str, str]:
    """What the admins' classification says about a tool's target: the name of its family of
    equivalent tools ("" when none is declared) and the argument that holds its target ("" for the
    default rule). Equivalence is declared on any active version (`equivalent_tools`) and named by the
    first tool of the list in sorted order, so every member keys alike; a target argument is taken from
    the versions whose patterns match the tool. Versions in policy and version order: the first wins."""
    family = target_argument = ""
    for version in sorted(versions, key=lambda v: (v.policy.slug, v.version)):
        tools = sorted(version.equivalent_tools or [])
        if not family and tool in tools:
            family = tools[0]
        if not target_argument and version.target_argument and pattern_matches(version, agent_slug, tool):
            target_argument = version.target_argument
    return family, target_argument


def classified_target_key(action: dict, agent_slug: str, versions: list[PolicyVersion]) -> str:
    """history.target_key with what the admins' classification says of this tool."""
    family, argument = tool_classification(agent_slug, str(action.get("tool") or ""), versions)
    return target_key(action, tool_family=family, target_argument=argument)
