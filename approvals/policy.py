"""Policy evaluation: what DESIGN.md "Policy" says, as pure functions over active PolicyVersions.

All matching active versions are evaluated. Any deny wins. Allows release without people. Approval
requirements merge: union of thresholds (the higher count per group), the strictest step-up, the
shortest TTL, self-approval only if every matching policy allows it, online consumption if any asks.
Nothing matching falls to the tenant default, which fails closed: one approval by the tenant admins.

A condition that cannot be evaluated (a missing field, a type error) never lets anything through:
for deny and require_approval policies it counts as a match; an allow policy with an error does not
allow, and its proposal needs the tenant admins instead.
"""

import fnmatch
from dataclasses import dataclass, field
from functools import lru_cache

import cel

from approvals.models import PolicyVersion, Tenant

PER_VOTE = "per_vote"


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


def validate_step_up(value: str) -> str:
    if value == PER_VOTE:
        return value
    if value.isdigit() and int(value) > 0:
        return value
    raise ValueError("step-up must be 'per_vote' or a freshness window in seconds (a positive number)")


def stricter_step_up(a: str, b: str) -> str:
    """per_vote is the strictest; between two windows, the shorter one."""
    if PER_VOTE in (a, b):
        return PER_VOTE
    return str(min(int(a), int(b)))


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
    reason: str = ""
    errors: list[str] = field(default_factory=list)

    @property
    def requirements(self) -> dict:
        return {
            "thresholds": self.thresholds,
            "step_up": self.step_up,
            "self_approval": self.self_approval,
            "consume": self.consume,
            "ttl_seconds": self.ttl_seconds,
        }


def evaluation_context(*, tool: str, args: dict, principal: dict, agent: str, consequences: dict) -> dict:
    return {"tool": tool, "args": args, "principal": principal, "agent": agent, "consequences": consequences}


def pattern_matches(version: PolicyVersion, agent_slug: str, tool: str) -> bool:
    return fnmatch.fnmatchcase(agent_slug, version.agent_pattern or "*") and fnmatch.fnmatchcase(
        tool, version.tool_pattern or "*"
    )


RISK_ORDER = {"": 0, "low": 1, "medium": 2, "high": 3}


def evaluate(tenant: Tenant, versions: list[PolicyVersion], context: dict) -> Evaluation:
    """Decide over the given active versions (the caller loads them; see active_versions_for)."""
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
        return Evaluation("deny", versions=denies, reason=f"denied by policy {names}", errors=errors,
                          risk="high", consume=False)

    approvals = [v for v in matched if v.outcome == PolicyVersion.Outcome.REQUIRE_APPROVAL]
    if approvals:
        return _merge_requirements(approvals, errors)

    allows = [v for v in matched if v.outcome == PolicyVersion.Outcome.ALLOW]
    if allows:
        return Evaluation("allow", versions=allows, reason=f"allowed by policy {allows[0]}",
                          ttl_seconds=min(v.ttl_seconds for v in allows),
                          consume=any(v.consume_online for v in allows),
                          risk=max((v.risk for v in allows), key=lambda r: RISK_ORDER.get(r, 0)),
                          errors=errors)

    return tenant_default(tenant, errors)


def _merge_requirements(versions: list[PolicyVersion], errors: list[str]) -> Evaluation:
    counts: dict[str, int] = {}
    step_up = versions[0].step_up
    for version in versions:
        for threshold in version.thresholds:
            counts[threshold["group"]] = max(counts.get(threshold["group"], 0), int(threshold["count"]))
        step_up = stricter_step_up(step_up, version.step_up)
    return Evaluation(
        "require_approval",
        versions=versions,
        thresholds=[{"group": group, "count": count} for group, count in sorted(counts.items())],
        step_up=step_up,
        ttl_seconds=min(v.ttl_seconds for v in versions),
        self_approval=all(v.allow_self_approval for v in versions),
        consume=any(v.consume_online for v in versions),
        risk=max((v.risk for v in versions), key=lambda r: RISK_ORDER.get(r, 0)),
        reason="requires approval by " + ", ".join(str(v) for v in versions),
        errors=errors,
    )


def tenant_default(tenant: Tenant, errors: list[str] | None = None) -> Evaluation:
    """Fail closed: one approval by the tenant's admin group, a fresh code per vote."""
    group = tenant.admin_group.slug if tenant.admin_group_id else "admins"
    return Evaluation(
        "require_approval",
        thresholds=[{"group": group, "count": 1}],
        step_up=PER_VOTE,
        ttl_seconds=tenant.default_ttl_seconds,
        reason="no policy matched: the tenant default requires approval by the tenant admins",
        risk="high",
        errors=errors or [],
    )


def active_versions_for(tenant: Tenant) -> list[PolicyVersion]:
    return list(
        PolicyVersion.objects.filter(policy__tenant=tenant, status=PolicyVersion.Status.ACTIVE)
        .select_related("policy")
        .order_by("policy__slug")
    )
