"""Checking a policy version's fields before it is stored: what each field may hold and which groups its
thresholds may name."""

from approvals.models import PolicyVersion, Risk
from approvals.policy import batching, break_glass
from approvals.policy import notifications as notify_rules
from approvals.policy.classification import REVERSIBILITY_CLASSES
from approvals.policy.evaluation import compile_condition
from approvals.policy.step_up import PER_VOTE, validate_step_up
from audit.verify.hashing import first_inexact_number

# ---------------------------------------------------------------------------------------------------
# Validating a version before it is stored (the service refuses, the admin form shows it on the field)

VERSION_FIELDS = (
    "agent_pattern",
    "tool_pattern",
    "condition",
    "outcome",
    "thresholds",
    "step_up",
    "ttl_seconds",
    "allow_self_approval",
    "consume_online",
    "risk",
    "reversibility",
    "target_argument",
    "equivalent_tools",
    "reservation_needs_second",
    "break_glass",
    "notifications",
    "batch",
)


def thresholds_error(thresholds, group_slugs: set[str]) -> str | None:
    if not isinstance(thresholds, list):
        return 'thresholds must be a JSON list like [{"group": "finance", "count": 1}]'
    seen: set[str] = set()
    for item in thresholds:
        if not isinstance(item, dict) or set(item) != {"group", "count"}:
            return 'each threshold is an object with exactly "group" and "count"'
        group, count = item["group"], item["count"]
        if not isinstance(group, str) or group not in group_slugs:
            known = ", ".join(sorted(group_slugs)) or "none yet"
            return f"unknown group {group!r}: this tenant's groups are {known}"
        if group in seen:
            return f"group {group!r} is named twice; give it one count"
        seen.add(group)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            return f"the count for {group!r} must be a whole number of at least 1"
    return None


def version_field_errors(
    fields: dict, group_slugs: set[str], people: set[str] | None = None
) -> dict[str, str]:
    """What is wrong with a draft's fields, by field name (empty when it may be stored). `people`: the
    usernames of the tenant's reviewers and admins, which a break-glass rule may name (None: unchecked)."""
    errors: dict[str, str] = {}
    unknown = set(fields) - set(VERSION_FIELDS)
    if unknown:
        errors["__all__"] = "unknown fields: " + ", ".join(sorted(unknown))
    outcome = fields.get("outcome")
    if outcome not in PolicyVersion.Outcome.values:
        errors["outcome"] = "outcome is allow, deny or require_approval"
    for name in ("agent_pattern", "tool_pattern"):
        value = fields.get(name, "*")
        if not isinstance(value, str) or not value.strip():
            errors[name] = "a glob such as * or payments.*"
    condition = fields.get("condition", "")
    if not isinstance(condition, str):
        errors["condition"] = "the condition is a CEL expression (text)"
    elif condition.strip():
        try:
            compile_condition(condition)
        except ValueError as error:
            errors["condition"] = str(error)
    thresholds = fields.get("thresholds", [])
    problem = thresholds_error(thresholds, group_slugs)
    if problem:
        errors["thresholds"] = problem
    elif outcome == PolicyVersion.Outcome.REQUIRE_APPROVAL and not thresholds:
        errors["thresholds"] = "an approval policy names at least one group and count"
    try:
        validate_step_up(fields.get("step_up", PER_VOTE))
    except ValueError as error:
        errors["step_up"] = str(error)
    ttl = fields.get("ttl_seconds", 3600)
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 1:
        errors["ttl_seconds"] = "the time to live is a whole number of seconds, at least 1"
    if fields.get("risk", "") not in Risk.values:
        errors["risk"] = "risk is empty, low, medium or high"
    if fields.get("reversibility", "") not in ("", *REVERSIBILITY_CLASSES):
        errors["reversibility"] = "reversibility is empty, R0, R1, R2 or R3"
    target_problem = target_classification_error(
        fields.get("target_argument", ""), fields.get("equivalent_tools", [])
    )
    if target_problem:
        errors[target_problem[0]] = target_problem[1]
    problem = break_glass.rule_error(fields.get("break_glass", {}), people)
    if problem:
        errors["break_glass"] = problem
    problem = batching.rule_error(fields.get("batch", {}))
    if problem:
        errors["batch"] = problem
    problem = notify_rules.notifications_error(fields.get("notifications", {}), people, group_slugs)
    if problem:
        errors["notifications"] = problem
    for name in VERSION_FIELDS:
        inexact = first_inexact_number(fields.get(name)) if name not in errors else None
        if inexact:
            where = f" (at {inexact[0]})" if inexact[0] else ""
            errors[name] = (
                f"{inexact[1]!r}{where} is too large: numbers in a policy lie within ±9007199254740991"
            )
    return errors


def target_classification_error(target_argument, equivalent_tools) -> tuple[str, str] | None:
    """(field, message) when the target classification is malformed, else None."""
    if (
        not isinstance(target_argument, str)
        or len(target_argument) > 100
        or target_argument != target_argument.strip()
    ):
        return "target_argument", "an argument name such as order_id (or empty), without spaces around it"
    if not isinstance(equivalent_tools, list) or not all(
        isinstance(tool, str) and tool.strip() and "*" not in tool for tool in equivalent_tools
    ):
        return "equivalent_tools", 'a JSON list of tool names, e.g. ["payments.refund", "payments.credit"]'
    if len(equivalent_tools) == 1:
        return "equivalent_tools", "name at least two tools that act alike, or none"
    return None
